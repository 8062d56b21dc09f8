//! Addresses, ports, marks and probabilities read from untrusted rule text, exactly as the
//! Python readers read them (`kpdoctor.dataplane.addresses`, `iptables/compile.py`): the two
//! must agree on every input, so each function says which Python expression it mirrors.

use std::net::{Ipv4Addr, Ipv6Addr};

/// An address match: IP version, first and last address of the range.
pub type Span = (u8, u128, u128);

/// An address match as a compiled rule stores it: an IPv4 range in 8 bytes, an IPv6 one boxed
/// (a node's rules are nearly all IPv4, and a quarter of a million of them are kept).
#[derive(Clone, Debug, PartialEq)]
pub enum Net {
    V4(u32, u32),
    V6(Box<(u128, u128)>),
}

impl Net {
    pub fn of(span: Span) -> Net {
        match span {
            (4, lo, hi) => Net::V4(lo as u32, hi as u32),
            (_, lo, hi) => Net::V6(Box::new((lo, hi))),
        }
    }

    pub fn span(&self) -> Span {
        match self {
            Net::V4(lo, hi) => (4, u128::from(*lo), u128::from(*hi)),
            Net::V6(b) => (6, b.0, b.1),
        }
    }

    /// Whether an address of IP `version` is in the range.
    pub fn contains(&self, version: u8, addr: u128) -> bool {
        match self {
            Net::V4(lo, hi) => version == 4 && u128::from(*lo) <= addr && addr <= u128::from(*hi),
            Net::V6(b) => version == 6 && b.0 <= addr && addr <= b.1,
        }
    }

    /// The single address the range holds, if it holds one.
    pub fn exact(&self) -> Option<u128> {
        match self {
            Net::V4(lo, hi) if lo == hi => Some(u128::from(*lo)),
            Net::V6(b) if b.0 == b.1 => Some(b.0),
            _ => None,
        }
    }
}

/// Python's `str.isspace()` for one character (Rust's `char::is_whitespace` lacks \x1c-\x1f).
pub fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `int(text)` for the decimal texts rule dumps hold (whitespace, a sign, `_` between
/// digits); None where Python raises. Only ASCII digits (Python also takes other scripts').
fn py_int10(text: &str) -> Option<i128> {
    let t = text.trim_matches(py_space);
    let (neg, digits) = match t.as_bytes().first() {
        Some(b'+') => (false, &t[1..]),
        Some(b'-') => (true, &t[1..]),
        _ => (false, t),
    };
    let v = digits_value(digits, 10)?;
    Some(if neg { -v } else { v })
}

/// Digits of one base with single `_` between them (Python's literal rules); None if empty,
/// malformed or beyond 2**100 (nothing in a rule is that large; Python's value is then out of
/// every range checked, as None is here).
fn digits_value(digits: &str, base: u32) -> Option<i128> {
    if digits.is_empty() || digits.starts_with('_') || digits.ends_with('_') || digits.contains("__") {
        return None;
    }
    let mut v: i128 = 0;
    for c in digits.chars() {
        if c == '_' {
            continue;
        }
        let d = c.to_digit(base)? as i128;
        v = v.checked_mul(base as i128)?.checked_add(d)?;
        if v > (1i128 << 100) {
            return None;
        }
    }
    Some(v)
}

/// `parse_span`: `10.0.0.0/8`, `1.2.3.4`, an IPv6 network, as a range; None if invalid.
pub fn parse_span(text: &str) -> Option<Span> {
    let (addr, plen) = match text.find('/') {
        Some(i) => (&text[..i], Some(&text[i + 1..])),
        None => (text, None),
    };
    let (n, version, width): (u128, u8, u32) = if addr.contains(':') {
        (u128::from(addr.parse::<Ipv6Addr>().ok()?), 6, 128)
    } else {
        (u128::from(u32::from(addr.parse::<Ipv4Addr>().ok()?)), 4, 32)
    };
    let bits = match plen {
        Some(p) => py_int10(p)?,
        None => width as i128,
    };
    if !(0..=width as i128).contains(&bits) {
        return None;
    }
    let free = width - bits as u32;
    let host: u128 = if free == 128 { u128::MAX } else { (1u128 << free) - 1 };
    Some((version, n & !host, (n & !host) | host))
}

/// `port_number`: a port as iptables-save prints it (decimal, 0-65535), or None.
pub fn port_number(text: &str) -> Option<u32> {
    if text.is_empty() || text.len() > 5 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u32 = text.parse().ok()?;
    (n <= 65535).then_some(n)
}

/// `_number`: a mark or mask (`0x4000`, `16384`, `0o10`) within 32 bits: Python's `int(text, 0)`.
pub fn number(text: &str) -> Option<u32> {
    if text.chars().count() > 34 {
        return None;
    }
    let t = text.trim_matches(py_space);
    let (neg, rest) = match t.as_bytes().first() {
        Some(b'+') => (false, &t[1..]),
        Some(b'-') => (true, &t[1..]),
        _ => (false, t),
    };
    let lower = rest.get(..2).map(|p| p.to_ascii_lowercase());
    let v = match lower.as_deref() {
        Some("0x") => digits_value(rest[2..].strip_prefix('_').unwrap_or(&rest[2..]), 16)?,
        Some("0o") => digits_value(rest[2..].strip_prefix('_').unwrap_or(&rest[2..]), 8)?,
        Some("0b") => digits_value(rest[2..].strip_prefix('_').unwrap_or(&rest[2..]), 2)?,
        _ => {
            // base 0 refuses a decimal with a leading zero unless every digit is zero
            let v = digits_value(rest, 10)?;
            if rest.starts_with('0') && v != 0 {
                return None;
            }
            v
        }
    };
    let v = if neg { -v } else { v };
    (0..=0xFFFF_FFFF).contains(&v).then_some(v as u32)
}

/// `_probability`: `--probability` as a number in [0, 1] (Python's `float`), or None.
pub fn probability(text: &str) -> Option<f64> {
    if text.chars().count() >= 40 {
        return None;
    }
    let t = text.trim_matches(py_space);
    // Python's float() takes `_` only between digits; Rust's parser takes none
    let bytes = t.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'_' {
            let ok = i > 0
                && i + 1 < bytes.len()
                && bytes[i - 1].is_ascii_digit()
                && bytes[i + 1].is_ascii_digit();
            if !ok {
                return None;
            }
        }
    }
    let cleaned: String = t.chars().filter(|&c| c != '_').collect();
    let lower = cleaned.to_ascii_lowercase();
    let body = lower.trim_start_matches(['+', '-']);
    // Rust reads "infinity"/"inf"/"nan" as Python does; both refuse hex floats and bare dots
    if body.starts_with("0x") || body.is_empty() {
        return None;
    }
    let p: f64 = cleaned.parse().ok()?;
    (0.0..=1.0).contains(&p).then_some(p)
}

/// `_ports`: `80`, `80:90`, `:90`, `80,443` as ranges; None when any part cannot be read.
pub fn ports(text: &str) -> Option<Vec<(u32, u32)>> {
    let mut out = Vec::new();
    for part in text.split(',') {
        let (a, sep, b) = match part.find(':') {
            Some(i) => (&part[..i], true, &part[i + 1..]),
            None => (part, false, ""),
        };
        let lo = if a.is_empty() { Some(0) } else { port_number(a) };
        let hi = if !b.is_empty() {
            port_number(b)
        } else if !sep {
            lo
        } else {
            Some(65535)
        };
        match (lo, hi) {
            (Some(lo), Some(hi)) if !a.is_empty() || sep => out.push((lo, hi)),
            _ => return None,
        }
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans() {
        assert_eq!(parse_span("10.0.0.0/8"), Some((4, 0x0a00_0000, 0x0aff_ffff)));
        assert_eq!(parse_span("1.2.3.4"), Some((4, 0x0102_0304, 0x0102_0304)));
        assert_eq!(parse_span("0.0.0.0/0"), Some((4, 0, 0xffff_ffff)));
        assert_eq!(parse_span("::/0"), Some((6, 0, u128::MAX)));
        assert_eq!(parse_span("fd00::1/128"), Some((6, 0xfd00 << 112 | 1, 0xfd00 << 112 | 1)));
        assert_eq!(parse_span("10.0.0.0/33"), None);
        assert_eq!(parse_span("01.2.3.4"), None);
        assert_eq!(parse_span("10.0.0.0/"), None);
    }

    #[test]
    fn numbers() {
        assert_eq!(number("0x4000"), Some(0x4000));
        assert_eq!(number("16384"), Some(16384));
        assert_eq!(number("0o10"), Some(8));
        assert_eq!(number("010"), None);
        assert_eq!(number("000"), Some(0));
        assert_eq!(number("0x1_0"), Some(16));
        assert_eq!(number("0x100000000"), None);
        assert_eq!(number("-1"), None);
        assert_eq!(number(""), None);
    }

    #[test]
    fn probabilities_and_ports() {
        assert_eq!(probability("0.50000000000"), Some(0.5));
        assert_eq!(probability("1.5"), None);
        assert_eq!(probability("nan"), None);
        assert_eq!(probability("1_0"), None);
        assert_eq!(probability("0.1_0"), Some(0.1));
        assert_eq!(ports("80,443:445"), Some(vec![(80, 80), (443, 445)]));
        assert_eq!(ports(":90"), Some(vec![(0, 90)]));
        assert_eq!(ports("90:"), Some(vec![(90, 65535)]));
        assert_eq!(ports(""), None);
        assert_eq!(ports("http"), None);
    }
}
