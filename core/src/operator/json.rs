//! The little JSON the operator's interface needs, by hand: the core has
//! no JSON crate, and what is written here is a fixed shape (the state, a
//! reply) while what is read is one flat object of strings (an action's
//! body). Writing escapes every string, so a key like `</script>` or
//! `"<img …>"` stays data.

use std::fmt::Write as _;

/// Appends `s` as a JSON string (quoted, escaped; `<`, `>`, `&` as
/// `\u00XX` too, so the text is safe even where a browser sniffs HTML).
pub(crate) fn string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Appends seconds with millisecond precision (`null` for `None`).
pub(crate) fn seconds(out: &mut String, s: Option<f64>) {
    match s {
        Some(v) if v.is_finite() => {
            let _ = write!(out, "{}", (v * 1000.0).round() / 1000.0);
        }
        _ => out.push_str("null"),
    }
}

/// Reads one flat JSON object whose values are strings (other values are
/// skipped when they are scalars) and returns the value of `field`. A name
/// given twice is an error (which of the two a proxy or a log read is not
/// known), and so is `field` with a value that is not a string.
///
/// # Errors
/// A message for the caller when `body` is not such an object.
pub(crate) fn field(body: &str, field: &str) -> Result<Option<String>, String> {
    let mut p = Parser {
        s: body.as_bytes(),
        i: 0,
    };
    p.ws();
    p.expect(b'{')?;
    let mut found = None;
    let mut seen = std::collections::HashSet::new();
    p.ws();
    if p.peek() == Some(b'}') {
        return Ok(None);
    }
    loop {
        p.ws();
        let name = p.string()?;
        if !seen.insert(name.clone()) {
            return Err(format!("the body names {name:?} more than once"));
        }
        p.ws();
        p.expect(b':')?;
        p.ws();
        if p.peek() == Some(b'"') {
            let value = p.string()?;
            if name == field {
                found = Some(value);
            }
        } else {
            p.scalar()?;
            if name == field {
                return Err(format!("\"{field}\" must be a string"));
            }
        }
        p.ws();
        match p.next() {
            Some(b',') => continue,
            Some(b'}') => break,
            _ => return Err("the body is not a JSON object".into()),
        }
    }
    p.ws();
    if p.i != p.s.len() {
        return Err("trailing text after the JSON object".into());
    }
    Ok(found)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn next(&mut self) -> Option<u8> {
        let c = self.peek();
        self.i += 1;
        c
    }
    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\n' | b'\r' | b'\t')) {
            self.i += 1;
        }
    }
    fn expect(&mut self, c: u8) -> Result<(), String> {
        if self.next() == Some(c) {
            Ok(())
        } else {
            Err(format!(
                "the body is not a JSON object (expected {:?})",
                c as char
            ))
        }
    }
    fn scalar(&mut self) -> Result<(), String> {
        let start = self.i;
        while matches!(self.peek(), Some(c) if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'+' | b'.'))
        {
            self.i += 1;
        }
        if self.i == start {
            return Err(
                "only strings, numbers, true, false and null are accepted as values".into(),
            );
        }
        Ok(())
    }
    fn hex4(&mut self) -> Result<u32, String> {
        let bad = || "a bad \\u escape in a JSON string".to_string();
        let digits = self.s.get(self.i..self.i + 4).ok_or_else(bad)?;
        let text = std::str::from_utf8(digits).map_err(|_| bad())?;
        self.i += 4;
        u32::from_str_radix(text, 16).map_err(|_| bad())
    }
    fn string(&mut self) -> Result<String, String> {
        self.expect(b'"')?;
        let mut out = Vec::new();
        loop {
            match self.next() {
                None => return Err("an unterminated JSON string".into()),
                Some(b'"') => break,
                Some(b'\\') => {
                    let c = match self.next() {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => {
                            let hi = self.hex4()?;
                            let code = if (0xD800..0xDC00).contains(&hi) {
                                if self.next() != Some(b'\\') || self.next() != Some(b'u') {
                                    return Err("a lone surrogate in a JSON string".into());
                                }
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err("a lone surrogate in a JSON string".into());
                                }
                                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                            } else {
                                hi
                            };
                            char::from_u32(code)
                                .ok_or_else(|| "a lone surrogate in a JSON string".to_string())?
                        }
                        _ => return Err("a bad escape in a JSON string".into()),
                    };
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                Some(c) if c < 0x20 => return Err("a control character in a JSON string".into()),
                Some(c) => out.push(c),
            }
        }
        String::from_utf8(out).map_err(|_| "a JSON string that is not UTF-8".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_round_trip_and_stay_data() {
        for s in ["plain", "<img src=x onerror=alert(1)>", "a\"b\\c\n\u{1}é😀"] {
            let mut out = String::from("{\"key\":");
            string(&mut out, s);
            out.push('}');
            assert!(!out.contains('<'), "{out}");
            assert_eq!(field(&out, "key").unwrap().as_deref(), Some(s));
        }
    }

    #[test]
    fn bodies() {
        assert_eq!(
            field(r#"{"a": 1, "key": "k", "b": null}"#, "key")
                .unwrap()
                .as_deref(),
            Some("k")
        );
        assert_eq!(field("{}", "key").unwrap(), None);
        for bad in [
            "",
            "[]",
            "{",
            r#"{"key": "x""#,
            r#"{"key": {}}"#,
            r#"{"key":"x"} junk"#,
            r#"{"key": "a", "key": "b"}"#,
            r#"{"key": "a", "x": 1, "x": 2}"#,
            r#"{"key": 5}"#,
        ] {
            assert!(field(bad, "key").is_err(), "{bad}");
        }
    }
}
