//! A rule line's tokens, as `kpdoctor.parse.iptables._split` gives them: iptables-save quotes
//! only whole tokens (comments) with double quotes, so splitting at the quotes is exact. A line
//! that needs a shell's rules (a backslash, an apostrophe, an odd number of quotes) is not split
//! here: the caller takes the Python parser's tokens for it.

use crate::addr::py_space;

/// The tokens after `-A CHAIN`, or None when the line needs the shell-word parser.
pub fn rule_args(body: &str) -> Option<Vec<&str>> {
    let toks = split(body)?;
    Some(toks.into_iter().skip(2).collect())
}

/// A rule's target: the token after its first `-j`, else after its first `-g` (`Rule.target`).
pub fn target<'a>(args: &[&'a str]) -> Option<&'a str> {
    ["-j", "-g"].iter().find_map(|flag| {
        let i = args.iter().position(|a| a == flag)?;
        args.get(i + 1).copied()
    })
}

/// Whether only a shell-word parser splits this line right (`split` gives None for it).
pub fn needs_shell(text: &str) -> bool {
    text.contains('"') && (text.contains('\\') || text.contains('\'') || text.matches('"').count() % 2 == 1)
}

fn split(text: &str) -> Option<Vec<&str>> {
    if !text.contains('"') {
        return Some(words(text).collect());
    }
    if text.contains('\\') || text.contains('\'') {
        return None;
    }
    let parts: Vec<&str> = text.split('"').collect();
    if parts.len() % 2 == 0 {
        return None;
    }
    let mut out = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        if i & 1 == 1 {
            out.push(*part);
        } else {
            out.extend(words(part));
        }
    }
    Some(out)
}

/// Python's `str.split()` with no argument.
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(py_space).filter(|w| !w.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_comments_are_one_token() {
        let got = rule_args(r#"-A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -m comment --comment "default/kubernetes:https cluster IP" -j KUBE-SVC-X"#);
        assert_eq!(
            got.unwrap(),
            ["-d", "10.96.0.1/32", "-p", "tcp", "-m", "comment", "--comment", "default/kubernetes:https cluster IP", "-j", "KUBE-SVC-X"]
        );
        assert_eq!(rule_args(r#"-A X -m comment --comment "a\"b" -j Y"#), None);
        assert_eq!(rule_args(r#"-A X -m comment --comment "a -j Y"#), None);
        assert_eq!(rule_args("-A X\u{1c}-j\tY").unwrap(), ["-j", "Y"]);
        assert_eq!(rule_args(r#"-A X --comment "" -j Y"#).unwrap(), ["--comment", "", "-j", "Y"]);
        assert_eq!(target(&["-p", "tcp", "-j", "KUBE-SVC-X"]), Some("KUBE-SVC-X"));
        assert_eq!(target(&["-g", "KUBE-A", "-j", "KUBE-B"]), Some("KUBE-B"));
        assert_eq!(target(&["-m", "x", "-j"]), None);
        assert_eq!(target(&["-j"]), None);
        assert_eq!(target(&["-j", "-g", "KUBE-C"]), Some("-g"));
        for line in [r#"-A X -m comment --comment "a\"b" -j Y"#, r#"-A X --comment "it's" -j Y"#, r#"-A X --comment "a -j Y"#, "-A X -j Y"] {
            assert_eq!(needs_shell(line), rule_args(line).is_none(), "{line}");
        }
    }
}
