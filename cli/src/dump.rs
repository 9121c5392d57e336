//! `colibri dump`: print a tensor's values (first rows, first columns) or a layer's router.

use colibri::model::{layer_name, suffix};
use colibri::{Error, LoadOptions};
use std::path::Path;

pub fn run(
    file: &Path,
    tensor: Option<&str>,
    gate: bool,
    layer: Option<usize>,
    expert: Option<usize>,
    rows: usize,
    cols: usize,
) -> Result<(), Error> {
    let model = crate::model_path::open(file, &LoadOptions::default())?;
    let name = match (gate, tensor, layer) {
        (true, _, Some(l)) => layer_name(l, suffix::ROUTER),
        (false, Some(t), Some(l)) if !t.starts_with("layers.") => layer_name(l, t),
        (false, Some(t), _) => t.to_string(),
        _ => return Err(Error::InvalidArgument { reason: "give --tensor NAME, or --gate --layer L".into() }),
    };
    let view = model.tensor(&name).ok_or_else(|| {
        if gate && layer.is_some_and(|l| l < model.config().n_layers) {
            Error::InvalidArgument { reason: format!("layer {} is dense: it has no router", layer.unwrap_or(0)) }
        } else {
            Error::InvalidArgument { reason: format!("no tensor named '{name}' (see `colibri inspect`)") }
        }
    })?;
    let view = match expert {
        Some(e) => view.expert(e).ok_or_else(|| Error::InvalidArgument {
            reason: format!("'{name}' is not an expert stack with an expert {e}"),
        })?,
        None => view,
    };
    println!("{name}: {} {:?}", view.dtype, view.shape);
    if view.n_experts() > 1 {
        println!("(expert stack: showing expert 0; pick another with --expert E)");
    }
    let shown = view.expert(0).unwrap_or(view);
    for r in 0..rows.min(shown.rows()) {
        let row = shown.row_f32(r).unwrap_or_default();
        let vals: Vec<String> = row.iter().take(cols).map(|v| format!("{v:.6}")).collect();
        let more = if row.len() > cols { ", …" } else { "" };
        println!("[{r}] [{}{more}]", vals.join(", "));
    }
    Ok(())
}
