//! The `colibri` command-line tool. Each subcommand lives in its own module; every command that
//! fails prints one line `error: <reason>` to stderr and exits with status 1 (2 for usage errors).

mod bench;
mod convert;
mod dequantize;
mod dump;
mod inspect;
mod logits;
mod model_path;
mod npy;
mod oom;
mod perplexity;
mod run;
mod serve;
mod threads;
mod tokenize;
mod validate;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[global_allocator]
static ALLOC: oom::ExitOnOom = oom::ExitOnOom;

#[derive(Parser)]
#[command(name = "colibri", version, about = "Mixture-of-Experts LLM inference on CPU from one .colibri file")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Convert a HuggingFace checkpoint directory (safetensors + config + tokenizer) or a
    /// llama.cpp GGUF model (tensors keep their GGUF types) to .colibri.
    Convert {
        /// Checkpoint directory (config.json, *.safetensors, tokenizer.json, ...), or a .gguf file
        /// (any part of a split one).
        input: PathBuf,
        /// Output .colibri file (written via a temp file and renamed on success).
        #[arg(short, long)]
        output: PathBuf,
        /// Dtype of the tensors left unquantised: f32, f16 or bf16 (default: keep each tensor's
        /// source dtype); or bf16r32 — bf16 with the matrices the products read whole (attention,
        /// experts, MLP, lm_head; rows and columns multiples of 32) in the AMX tiles' order,
        /// which CPUs with AMX decode faster (the same values and results on every CPU).
        #[arg(long, value_parser = parse_convert_dtype)]
        dtype: Option<colibri::format::DType>,
        /// Block-quantise the attention, expert, shared-expert, dense MLP and lm_head matrices:
        /// q8 (8-bit) or w4a16 (4-bit weights, stored as q4). Matrices whose rows are not a
        /// multiple of 32 stay float (f16, or --dtype), with a warning.
        #[arg(long, value_parser = colibri_convert::quantize::Scheme::parse)]
        quantize: Option<colibri_convert::quantize::Scheme>,
        /// Quantise only these classes (comma list of experts, shared, attn, mlp, lm_head).
        #[arg(long, requires = "quantize", value_delimiter = ',', value_parser = colibri_convert::quantize::parse_class)]
        quantize_only: Option<Vec<colibri::model::QuantClass>>,
        /// Store quantised matrices row-major (q8 / q4) instead of in 8-row interleaved groups
        /// (q8r8 / q4r8, the default: same bytes and values, faster matrix-vector kernels).
        #[arg(long, requires = "quantize")]
        no_interleave: bool,
        /// Attach this file's bytes as user metadata (read back with `inspect` and the API).
        #[arg(long)]
        user_metadata: Option<PathBuf>,
        /// Do not draw a progress bar.
        #[arg(long)]
        no_progress: bool,
    },
    /// Write a copy of a .colibri file with every q8/q4 tensor dequantised to a float dtype.
    Dequantize {
        input: PathBuf,
        /// Output .colibri file (written via a temp file and renamed on success).
        #[arg(short, long)]
        output: PathBuf,
        /// Dtype of the dequantised tensors: f16 (default), f32 or bf16.
        #[arg(long, value_parser = parse_dtype, default_value = "f16")]
        dtype: colibri::format::DType,
    },
    /// Show the header, config, tokenizer, parameters and tensor table of a .colibri file.
    Inspect {
        file: PathBuf,
        /// Machine-readable JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Check a .colibri file completely: structure, config, checksums, NaN/Inf scan.
    Validate {
        file: PathBuf,
        /// Read the file into memory instead of mapping it.
        #[arg(long)]
        no_mmap: bool,
    },
    /// Generate text from a prompt (stdout: the generated text only; stderr: statistics).
    Run(run::RunArgs),
    /// Interactive chat with the model's chat template (keeps the KV cache between turns).
    Chat(run::RunArgs),
    /// Teacher-forced logits of every position as a float32 .npy [n_tokens, vocab].
    Logits {
        /// Model file (default: $COLIBRI_MODEL, then the shipped default model).
        #[arg(short = 'm', long)]
        model: Option<PathBuf>,
        /// Comma-separated token ids, fed as given (no BOS added).
        #[arg(long)]
        tokens: String,
        /// Output .npy file.
        #[arg(short, long)]
        output: PathBuf,
        /// Worker threads.
        #[arg(short = 't', long)]
        threads: Option<usize>,
    },
    /// Measure prompt processing (pp) and generation (tg) speed, llama-bench style.
    Bench(bench::BenchArgs),
    /// Perplexity of a text file (and, with --kl-base, the KL divergence from a base model).
    Perplexity(perplexity::PerplexityArgs),
    /// Serve the model over HTTP: the OpenAI API, POST /generate, /health, /metrics.
    Serve(serve::ServeArgs),
    /// Token ids of a text under a model's tokenizer (stdout: the ids, or one `id<TAB>piece` line
    /// each with --pieces).
    Tokenize(tokenize::TokenizeArgs),
    /// Print the values of one tensor (or of a layer's router with --gate).
    Dump {
        file: PathBuf,
        /// Tensor name (full, or a layer suffix such as `attn.q` together with --layer).
        #[arg(long, required_unless_present = "gate")]
        tensor: Option<String>,
        /// Print the router weights of --layer.
        #[arg(long, requires = "layer")]
        gate: bool,
        /// Layer index.
        #[arg(long)]
        layer: Option<usize>,
        /// Expert index (for expert stacks).
        #[arg(long)]
        expert: Option<usize>,
        /// Rows to print.
        #[arg(long, default_value_t = 4)]
        rows: usize,
        /// Values per row to print.
        #[arg(long, default_value_t = 8)]
        cols: usize,
    },
}

/// A float dtype name (block types are chosen with --quantize).
fn parse_dtype(s: &str) -> Result<colibri::format::DType, String> {
    colibri::format::DType::from_name(s)
        .filter(|d| !d.is_quantized() && !d.is_interleaved())
        .ok_or_else(|| format!("unknown dtype '{s}' (use f32, f16 or bf16)"))
}

/// `convert --dtype`: a float type, or bf16r32.
fn parse_convert_dtype(s: &str) -> Result<colibri::format::DType, String> {
    use colibri::format::DType;
    parse_dtype(s).or_else(|_| match DType::from_name(s) {
        Some(DType::Bf16R32) => Ok(DType::Bf16R32),
        _ => Err(format!("unknown dtype '{s}' (use f32, f16, bf16 or bf16r32)")),
    })
}

/// Run one command; its error (the library's or the converter's) is printed by `main`.
fn run(cli: Cli) -> Result<(), Box<dyn std::error::Error>> {
    match cli.command {
        Command::Convert {
            input,
            output,
            dtype,
            quantize,
            quantize_only,
            no_interleave,
            user_metadata,
            no_progress,
        } => {
            let args = colibri_convert::ConvertArgs {
                input,
                output,
                dtype,
                quantize: quantize.map(|scheme| {
                    colibri_convert::quantize::Quantize::new(scheme, quantize_only).with_interleave(!no_interleave)
                }),
                user_metadata,
            };
            let bar = convert::Bar::default();
            let progress = !no_progress && std::io::IsTerminal::is_terminal(&std::io::stderr());
            let r = colibri_convert::convert(&args, progress.then_some(&bar as &dyn colibri_convert::Progress))?;
            for w in &r.warnings {
                eprintln!("warning: {w}");
            }
            let quantised = match r.quant_dtype {
                Some(d) => format!("; {} of {} tensors {d}", r.quantised, r.tensors),
                None => String::new(),
            };
            eprintln!(
                "converted {}: {} params ({} active per token), {} layers, {} experts top-{} -> {} ({} bytes, \
                 {:.2} bits per weight{quantised}) in {:.2} s",
                r.family,
                inspect::human_count(r.params),
                inspect::human_count(r.active),
                r.n_layers,
                r.n_experts,
                r.top_k,
                r.output.display(),
                r.bytes,
                r.bits_per_weight,
                r.seconds
            );
            Ok(())
        }
        Command::Dequantize { input, output, dtype } => {
            let r = dequantize::run(&input, &output, dtype)?;
            eprintln!(
                "dequantized {} of {} tensors to {dtype} -> {} ({} bytes)",
                r.dequantised,
                r.tensors,
                output.display(),
                r.bytes
            );
            Ok(())
        }
        Command::Inspect { file, json } => Ok(inspect::run(&file, json)?),
        Command::Run(a) => Ok(run::run(&a)?),
        Command::Chat(mut a) => {
            a.chat = true;
            Ok(run::run(&a)?)
        }
        Command::Logits { model, tokens, output, threads } => {
            Ok(logits::run(model.as_deref(), &tokens, &output, threads)?)
        }
        Command::Bench(a) => Ok(bench::run(&a)?),
        Command::Tokenize(a) => Ok(tokenize::run(&a)?),
        Command::Perplexity(a) => Ok(perplexity::run(&a)?),
        Command::Serve(a) => Ok(serve::run(&a)?),
        Command::Validate { file, no_mmap } => Ok(validate::run(&file, no_mmap)?),
        Command::Dump { file, tensor, gate, layer, expert, rows, cols } => {
            Ok(dump::run(&file, tensor.as_deref(), gate, layer, expert, rows, cols)?)
        }
    }
}

/// Options of `run` that `chat` does not use: hidden from `colibri chat --help`.
const NOT_CHAT: [&str; 4] = ["chat", "embedding", "debug_routing", "file"];

/// The command line, with `chat`'s help listing only its own options; a `run` without a prompt
/// is a usage error (exit 2).
fn parse() -> Cli {
    let cmd =
        Cli::command().mut_subcommand("chat", |c| NOT_CHAT.iter().fold(c, |c, a| c.mut_arg(*a, |a| a.hide(true))));
    let matches = cmd.clone().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Command::Run(a) = &cli.command {
        if a.prompt.is_none() && a.file.is_none() && a.embedding.is_none() && !a.chat {
            let mut cmd = cmd;
            let run = cmd.find_subcommand_mut("run").cloned().unwrap_or_default();
            run.bin_name("colibri run")
                .error(
                    clap::error::ErrorKind::MissingRequiredArgument,
                    "no prompt: give -p TEXT or -f FILE (or use `colibri chat`)",
                )
                .exit();
        }
    }
    cli
}

/// Die quietly of SIGPIPE, as command-line tools do, when the reader of stdout goes away
/// (`colibri inspect … | head`). Not for `serve`, whose sockets must see EPIPE instead.
fn quiet_broken_pipe(cli: &Cli) {
    if !matches!(cli.command, Command::Serve(_)) {
        // SAFETY: resetting a signal's disposition to its default before any thread starts.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
}

/// Create a thread's thread-locals of the library, the tokenizer and the template engine at
/// its start, while memory is plentiful (`colibri::threads::prepare_thread`): the main thread,
/// and the server's runtime and scheduler threads.
pub(crate) fn prepare_thread() {
    colibri::threads::prepare_thread();
    colibri::tokenizer::prepare_thread();
}

fn main() -> ExitCode {
    oom::one_arena_under_address_limit();
    prepare_thread();
    let cli = parse();
    quiet_broken_pipe(&cli);
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            match model_path::gguf_advice(e.as_ref()) {
                Some(advice) => eprintln!("error: {advice}"),
                None => eprintln!("error: {e}"),
            }
            ExitCode::FAILURE
        }
    }
}
