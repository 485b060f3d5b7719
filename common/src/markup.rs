//! Text put into HTML and SVG (XML) documents: the comparison's report and the shaper's plots.
//! One escape for both, so a label reads the same in each.
//!
//! Invariant: the result has no `<`, `>`, `"`, `'` and no `&` that does not start one of the five
//! entities written here, and no control character but tab, newline and carriage return (the
//! others are not allowed in XML 1.0 and are parse errors in HTML): each becomes a space.

/// `s` escaped for HTML and XML text and attribute values (see the module doc).
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_characters_become_entities_and_controls_spaces() {
        assert_eq!(
            escape("a <b> & \"c\" 'd'"),
            "a &lt;b&gt; &amp; &quot;c&quot; &#39;d&#39;"
        );
        assert_eq!(escape("x\u{0}y\u{1b}z\u{7f}"), "x y z ");
        assert_eq!(escape("tab\tline\nret\r"), "tab\tline\nret\r");
        assert_eq!(escape("déjà vu ✓"), "déjà vu ✓");
        assert_eq!(escape(""), "");
    }
}
