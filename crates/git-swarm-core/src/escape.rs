//! Task text is data. Before it reaches a terminal, control characters are escaped so that a title cannot move the
//! cursor, clear the screen or forge a line of output.

/// One line: every control character (newlines too) escaped.
pub fn line(s: &str) -> String {
    escape(s, false)
}

/// Text on one line, each run of whitespace (newlines too) one space: a parser's message inside one of ours.
pub fn squash(text: &dyn std::fmt::Display) -> String {
    text.to_string().split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A block of text: newlines and tabs kept, every other control character escaped.
pub fn block(s: &str) -> String {
    escape(s, true)
}

fn escape(s: &str, keep_newlines: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' | '\t' if keep_newlines => out.push(c),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() || is_bidi_control(c) => out.extend(c.escape_unicode()),
            c => out.push(c),
        }
    }
    out
}

/// Characters that reorder text on screen (the "trojan source" family).
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_terminal_controls() {
        assert_eq!(line("a\x1b[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(line("one\ntwo"), "one\\ntwo");
        assert_eq!(block("one\ntwo\x07"), "one\ntwo\\u{7}");
        assert_eq!(line("ok \u{202E}gnp"), "ok \\u{202e}gnp");
        assert_eq!(line("plain ünïcode"), "plain ünïcode");
    }
}
