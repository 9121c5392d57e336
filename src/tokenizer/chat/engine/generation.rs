//! transformers' `{% generation %}...{% endgeneration %}` (its assistant-mask extension): in
//! rendering the body is output as is. minijinja has no custom tags, so each tag becomes the
//! equivalent no-op block tag, keeping its whitespace-control marks: `{%- generation %}` →
//! `{%- if true %}`, `{% endgeneration -%}` → `{% endif -%}`.

/// `source` with every generation tag replaced (see the module doc).
pub(super) fn as_if_blocks(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(at) = rest.find("{%") {
        out.push_str(&rest[..at]);
        let tag = &rest[at..];
        match replacement(tag) {
            Some((len, text)) => {
                out.push_str(&text);
                rest = &tag[len..];
            }
            None => {
                out.push_str("{%");
                rest = &tag[2..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// For a tag at the start of `tag` that is `generation` or `endgeneration`: its length and
/// replacement.
fn replacement(tag: &str) -> Option<(usize, String)> {
    let end = tag.find("%}")?;
    let inner = &tag[2..end];
    let (open_mark, inner) = split_mark(inner, true);
    let (close_mark, inner) = split_mark(inner, false);
    let word = match inner.trim() {
        "generation" => "if true",
        "endgeneration" => "endif",
        _ => return None,
    };
    Some((end + 2, format!("{{%{open_mark} {word} {close_mark}%}}")))
}

/// A leading (or trailing) `-` / `+` whitespace-control mark and the rest.
fn split_mark(s: &str, leading: bool) -> (&str, &str) {
    let mark = if leading { s.chars().next() } else { s.chars().last() };
    match mark {
        Some(c @ ('-' | '+')) if leading => (if c == '-' { "-" } else { "+" }, &s[1..]),
        Some(c @ ('-' | '+')) => (if c == '-' { "-" } else { "+" }, &s[..s.len() - 1]),
        _ => ("", s),
    }
}

#[cfg(test)]
mod tests {
    use super::as_if_blocks;

    #[test]
    fn generation_tags_become_if_blocks() {
        assert_eq!(
            as_if_blocks("a{%- generation %}{{ x }}{% endgeneration -%} {% if y %}{%+generation+%}{%endgeneration%}"),
            "a{%- if true %}{{ x }}{% endif -%} {% if y %}{%+ if true +%}{% endif %}"
        );
        assert_eq!(as_if_blocks("{{ '{%' }} {% raw %}x"), "{{ '{%' }} {% raw %}x");
    }
}
