//! Stop strings of one generation: text that might still become a stop string is held back, so
//! a caller (a terminal, a streaming client) never sees any part of one. Owns its stop strings,
//! so it can live in per-sequence state (the server's scheduler) as well as in `generate`.

/// Holds back text that could still become a stop string.
#[derive(Clone, Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// Text emitted so far plus the held-back tail.
    text: String,
    emitted: usize,
}

impl StopMatcher {
    /// A matcher for `stops` (empty strings are ignored).
    pub fn new(stops: Vec<String>) -> Self {
        StopMatcher { stops: stops.into_iter().filter(|s| !s.is_empty()).collect(), ..Default::default() }
    }

    /// Add text; returns (text now safe to emit, whether a stop string was found).
    pub fn push(&mut self, piece: &str) -> (String, bool) {
        self.text.push_str(piece);
        // Only the tail can hold a new match: search from where the longest stop could start.
        let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
        let mut from = self.emitted.saturating_sub(longest);
        while !self.text.is_char_boundary(from) {
            from -= 1;
        }
        if let Some(at) = self.stops.iter().filter_map(|s| self.text[from..].find(s.as_str()).map(|i| i + from)).min() {
            let out = self.text[self.emitted..at.max(self.emitted)].to_string();
            self.text.truncate(at);
            self.emitted = self.text.len();
            return (out, true);
        }
        let mut hold = 0;
        for s in &self.stops {
            for l in (1..s.len().min(self.text.len()) + 1).rev() {
                if s.is_char_boundary(l) && self.text.ends_with(&s[..l]) {
                    hold = hold.max(l);
                    break;
                }
            }
        }
        let safe = self.text.len() - hold;
        let out = self.text[self.emitted..safe.max(self.emitted)].to_string();
        self.emitted = safe.max(self.emitted);
        (out, false)
    }

    /// Everything not emitted yet (at the end of generation).
    pub fn flush(&mut self) -> String {
        let out = self.text[self.emitted..].to_string();
        self.emitted = self.text.len();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::StopMatcher;

    #[test]
    fn stop_strings_are_held_back_and_cut() {
        let mut m = StopMatcher::new(vec!["</s>".into(), "STOP".into(), String::new()]);
        assert_eq!(m.push("Hello <"), ("Hello ".to_string(), false));
        assert_eq!(m.push("/"), (String::new(), false));
        assert_eq!(m.push("x"), ("</x".to_string(), false));
        assert_eq!(m.push(" ST"), (" ".to_string(), false));
        assert_eq!(m.push("OP and more"), (String::new(), true));
        assert_eq!(m.text, "Hello </x ");
    }

    #[test]
    fn no_stops_emit_everything() {
        let mut m = StopMatcher::new(vec![]);
        assert_eq!(m.push("abc"), ("abc".to_string(), false));
        assert_eq!(m.flush(), "");
    }

    #[test]
    fn a_stop_inside_one_piece_cuts_before_it() {
        let mut m = StopMatcher::new(vec!["\n\n".into()]);
        assert_eq!(m.push("é one\n"), ("é one".to_string(), false));
        assert_eq!(m.push("\ntwo"), (String::new(), true));
    }
}
