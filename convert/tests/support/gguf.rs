//! Shared by the GGUF fixture tests: where the fixture GGUFs are, conversion through the
//! converter library with the checkpoint's tokenizer files (progress checked), and the logits of
//! a model over a prompt.
#![allow(dead_code)] // each test binary uses a different subset

use super::fixtures::models_root;
use colibri::forward::{forward, ForwardOptions, Input, LogitsMode};
use colibri::kernels::QuantActivations;
use colibri::session::{Session, SessionOptions};
use colibri::Model;
use colibri_convert::gguf::tokenizer::HfTokenizerFiles;
use colibri_convert::{ConvertArgs, Progress};
use std::cell::Cell;
use std::path::{Path, PathBuf};

/// tests/fixtures/gguf.
pub fn gguf_root() -> PathBuf {
    models_root().parent().unwrap().join("gguf")
}

struct Count(Cell<u64>, Cell<u64>);

impl Progress for Count {
    fn start(&self, total: u64) {
        self.0.set(total);
    }
    fn advance(&self, bytes: u64) {
        self.1.set(self.1.get() + bytes);
    }
    fn finish(&self) {}
}

/// `colibri convert FILE.gguf -o OUT`, with the checkpoint's tokenizer files.
pub fn convert_gguf(gguf: &Path, hf_dir: &Path, out: &Path) {
    let read = |f: &str| std::fs::read_to_string(hf_dir.join(f)).unwrap();
    let tok = HfTokenizerFiles {
        tokenizer_json: read("tokenizer.json"),
        tokenizer_config_json: read("tokenizer_config.json"),
    };
    let args = ConvertArgs { input: gguf.into(), output: out.into(), dtype: None, quantize: None, user_metadata: None };
    let count = Count(Cell::new(0), Cell::new(0));
    colibri_convert::gguf::convert::convert(&args, &count, Some(tok))
        .unwrap_or_else(|e| panic!("{}: {e}", gguf.display()));
    assert_eq!(count.0.get(), count.1.get(), "progress: every planned byte reported");
}

/// The logits of every position of `input` (one prefill), with `quant_act` activations.
pub fn logits_with(model: &Model, input: &[u32], quant_act: QuantActivations) -> Vec<f32> {
    let mut s = Session::new(model.config(), &SessionOptions { n_ctx: 256, quant_act, ..Default::default() }).unwrap();
    forward(model, &mut s, Input::Tokens(input), &ForwardOptions { logits: LogitsMode::All, ..Default::default() })
        .unwrap();
    s.logits().to_vec()
}
