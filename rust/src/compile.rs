//! A rule's tokens compiled into the fields, conditions and target the walk checks: the same
//! model as `kpdoctor/dataplane/iptables/compile.py` (semantic: it knows what `-m statistic` or
//! `-j DNAT` do, never what kube-proxy calls its chains). A match it does not know is kept as
//! an unknown condition, which makes a walk that reaches it uncertain instead of guessing.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use crate::addr::{self, Net};

/// A target's or protocol's name, shared: a table's 176,000 rules at 10,000 Services name a
/// few dozen verdicts and protocols and jump to chains whose names the table holds already
/// (`Table::compiled` hands over its own), so no rule allocates one.
pub type Name = Arc<str>;

/// The names most rules use, allocated once for the process.
static KNOWN: LazyLock<HashMap<&'static str, Name>> = LazyLock::new(|| {
    [
        "ACCEPT", "DROP", "REJECT", "RETURN", "DNAT", "SNAT", "MASQUERADE", "MARK", "REDIRECT", "LOG", "NFLOG",
        "TRACE", "CONNMARK", "CT", "NOTRACK", "NFQUEUE", "tcp", "udp", "sctp", "icmp", "icmpv6", "all",
    ]
    .into_iter()
    .map(|n| (n, Name::from(n)))
    .collect()
});

/// `name` as a shared [`Name`]: one of [`KNOWN`], else a new one.
pub fn known_name(name: &str) -> Name {
    KNOWN.get(name).cloned().unwrap_or_else(|| Name::from(name))
}

/// Destination ports: one range inline (nearly every rule that has any), more behind a thin
/// pointer (multiport rules are few), so that the whole fits in 16 bytes.
#[derive(Clone, Debug, PartialEq)]
pub enum Ports {
    One((u32, u32)),
    #[allow(clippy::box_collection)]
    Many(Box<Vec<(u32, u32)>>),
}

impl Ports {
    fn of(ranges: Vec<(u32, u32)>) -> Ports {
        match ranges.as_slice() {
            [one] => Ports::One(*one),
            _ => Ports::Many(Box::new(ranges)),
        }
    }

    pub fn ranges(&self) -> &[(u32, u32)] {
        match self {
            Ports::One(r) => std::slice::from_ref(r),
            Ports::Many(rs) => rs,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum CondKind {
    Iif(String),
    Oif(String),
    Sport(Vec<(u32, u32)>),
    /// (source side?, type upper-cased)
    Addrtype(bool, String),
    Mark(u32, u32),
    Ctstate(Vec<String>),
    Random(f64),
    /// --every
    Nth(u32),
    Recent(String),
    Set(String),
    Physdev,
    Unknown(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Cond {
    pub kind: CondKind,
    pub negated: bool,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MarkOp {
    SetXmark,
    SetMark,
    OrMark,
    XorMark,
    AndMark,
}

/// What a rule does when it matches: a target without options (a verdict, a chain, an
/// extension given none) inline, anything with options boxed (most rules of a dump are jumps).
#[derive(Clone, Debug, PartialEq)]
pub enum Target {
    Plain { name: Name, goto: bool },
    Full(Box<TargetSpec>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct TargetSpec {
    pub name: Name,
    pub goto: bool,
    /// DNAT --to-destination: (host, port)
    pub to_destination: Option<(Box<str>, Option<u32>)>,
    /// the DNAT address as parsed, when a single address
    pub to_addr: Option<u128>,
    pub to_ports: Option<u32>,
    pub mark: Option<(MarkOp, u32, u32)>,
    pub notrack: bool,
    /// an option value that cannot be read: the rule's outcome is uncertain
    pub problem: Option<Box<str>>,
}

impl TargetSpec {
    fn named(name: Name, goto: bool) -> TargetSpec {
        TargetSpec { name, goto, to_destination: None, to_addr: None, to_ports: None, mark: None, notrack: false, problem: None }
    }
}

impl Target {
    pub fn name(&self) -> &str {
        match self {
            Target::Plain { name, .. } => name,
            Target::Full(t) => &t.name,
        }
    }

    pub fn goto(&self) -> bool {
        match self {
            Target::Plain { goto, .. } => *goto,
            Target::Full(t) => t.goto,
        }
    }

    pub fn notrack(&self) -> bool {
        match self {
            Target::Plain { name, .. } => &**name == "NOTRACK",
            Target::Full(t) => t.notrack,
        }
    }

    /// The options, when the target has any.
    pub fn spec(&self) -> Option<&TargetSpec> {
        match self {
            Target::Plain { .. } => None,
            Target::Full(t) => Some(t),
        }
    }
}

/// A rule as the walk checks it: the common matches as plain fields, the rest as conditions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CompiledRule {
    pub src: Option<Net>,
    pub dst: Option<Net>,
    pub proto: Option<Name>,
    pub dport: Option<Ports>,
    /// the rule's only condition is `-m statistic --mode random`: checked inline
    pub prob: Option<f64>,
    pub conds: Box<[Cond]>,
    pub target: Option<Target>,
    pub src_neg: bool,
    pub dst_neg: bool,
    pub proto_neg: bool,
    pub dport_neg: bool,
}

impl CompiledRule {
    /// The single destination address the rule requires, if any (for the chain index).
    pub fn exact_dst(&self) -> Option<u128> {
        if self.dst_neg {
            return None;
        }
        self.dst.as_ref().and_then(Net::exact)
    }

    pub fn exact_dport(&self) -> Option<u128> {
        match self.dport.as_ref().map(Ports::ranges) {
            Some(&[(lo, hi)]) if !self.dport_neg && lo == hi => Some(lo as u128),
            _ => None,
        }
    }
}

const KNOWN_MODULES: &[&str] = &[
    "comment", "tcp", "udp", "sctp", "multiport", "addrtype", "mark", "conntrack", "state", "statistic",
    "recent", "nfacct", "set", "physdev", "icmp", "icmp6", "icmpv6",
];

/// Options that only annotate or count: how many values each takes.
fn skipped(tok: &str) -> Option<usize> {
    Some(match tok {
        "--comment" | "--nfacct-name" | "--icmp-type" | "--icmpv6-type" | "--seconds" | "--hitcount" | "--name"
        | "--mask" | "--reject-with" => 1,
        "--tcp-flags" => 2,
        "--syn" | "--reap" | "--rsource" | "--rdest" | "--rttl" | "--limit-iface-in" | "--limit-iface-out" => 0,
        _ => return None,
    })
}

enum Tok {
    Dst,
    Src,
    Proto,
    Match,
    Jump,
    Dport,
    Sport,
    Iface,
    Addrtype,
    Ctstate,
}

fn token(t: &str) -> Option<Tok> {
    Some(match t {
        "-d" | "--destination" => Tok::Dst,
        "-s" | "--source" => Tok::Src,
        "-p" | "--protocol" => Tok::Proto,
        "-m" | "--match" => Tok::Match,
        "-j" | "--jump" | "-g" | "--goto" => Tok::Jump,
        "--dport" | "--destination-port" | "--dports" | "--destination-ports" => Tok::Dport,
        "--sport" | "--source-port" | "--sports" | "--source-ports" => Tok::Sport,
        "-i" | "--in-interface" | "-o" | "--out-interface" => Tok::Iface,
        "--src-type" | "--dst-type" => Tok::Addrtype,
        "--ctstate" | "--state" => Tok::Ctstate,
        _ => return None,
    })
}

fn unknown(text: String, negated: bool) -> Cond {
    Cond { kind: CondKind::Unknown(text), negated }
}

/// `compile_general`: every option kpdoctor knows, in any order.
#[cfg(test)]
pub fn compile<S: AsRef<str>>(toks: &[S]) -> CompiledRule {
    compile_named(toks, &known_name)
}

/// [`compile`], with `names` giving the shared name of a target or protocol (a table's own
/// chain names, [`known_name`] else).
pub fn compile_named<S: AsRef<str>>(toks: &[S], names: &dyn Fn(&str) -> Name) -> CompiledRule {
    let mut cr = CompiledRule::default();
    let n = toks.len();
    let mut conds: Vec<Cond> = Vec::new();
    let mut i = 0;
    let mut neg = false;
    let mut module = String::new();
    while i < n {
        let t = toks[i].as_ref();
        if t == "!" {
            neg = true;
            i += 1;
            continue;
        }
        let nxt = toks.get(i + 1).map(AsRef::as_ref).unwrap_or("");
        match token(t) {
            None => {
                if let Some(k) = skipped(t) {
                    i += 1 + k;
                } else {
                    i = other(toks, i, &module, neg, &mut conds);
                }
            }
            Some(Tok::Match) => {
                module = nxt.to_owned();
                if !KNOWN_MODULES.contains(&nxt) {
                    conds.push(unknown(format!("-m {nxt}"), neg));
                }
                i += 2;
            }
            Some(kind @ (Tok::Dst | Tok::Src)) => {
                match addr::parse_span(nxt) {
                    None => conds.push(unknown(format!("{t} {nxt}"), neg)),
                    Some(span) => {
                        if matches!(kind, Tok::Dst) {
                            cr.dst = Some(Net::of(span));
                            cr.dst_neg = neg;
                        } else {
                            cr.src = Some(Net::of(span));
                            cr.src_neg = neg;
                        }
                    }
                }
                i += 2;
            }
            Some(Tok::Proto) => {
                cr.proto = Some(if nxt.bytes().any(|b| b.is_ascii_uppercase()) || !nxt.is_ascii() {
                    names(&nxt.to_lowercase())
                } else {
                    names(nxt)
                });
                cr.proto_neg = neg;
                i += 2;
            }
            Some(Tok::Jump) => {
                let (tgt, j) = target(toks, i, names);
                cr.target = Some(tgt);
                i = j;
            }
            Some(Tok::Dport) => {
                match addr::ports(nxt) {
                    None => conds.push(unknown(format!("{t} {nxt}"), neg)),
                    Some(p) => {
                        cr.dport = Some(Ports::of(p));
                        cr.dport_neg = neg;
                    }
                }
                i += 2;
            }
            Some(Tok::Sport) => {
                conds.push(match addr::ports(nxt) {
                    None => unknown(format!("{t} {nxt}"), neg),
                    Some(p) => Cond { kind: CondKind::Sport(p), negated: neg },
                });
                i += 2;
            }
            Some(Tok::Iface) => {
                let kind = if t == "-i" || t == "--in-interface" {
                    CondKind::Iif(nxt.to_owned())
                } else {
                    CondKind::Oif(nxt.to_owned())
                };
                conds.push(Cond { kind, negated: neg });
                i += 2;
            }
            Some(Tok::Addrtype) => {
                conds.push(Cond { kind: CondKind::Addrtype(t == "--src-type", nxt.to_uppercase()), negated: neg });
                i += 2;
            }
            Some(Tok::Ctstate) => {
                let states = nxt.to_uppercase().split(',').map(str::to_owned).collect();
                conds.push(Cond { kind: CondKind::Ctstate(states), negated: neg });
                i += 2;
            }
        }
        neg = false;
    }
    match conds.as_slice() {
        [Cond { kind: CondKind::Random(p), negated: false }] => cr.prob = Some(*p),
        _ => cr.conds = conds.into(),
    }
    cr
}

/// `_other`: the less common options (mark, statistic, recent, ipset, physdev); the next index.
fn other<S: AsRef<str>>(toks: &[S], i: usize, module: &str, neg: bool, conds: &mut Vec<Cond>) -> usize {
    let n = toks.len();
    let t = toks[i].as_ref();
    let nxt = toks.get(i + 1).map(AsRef::as_ref).unwrap_or("");
    if t == "--mark" && module == "mark" {
        conds.push(match mark(nxt) {
            None => unknown(format!("--mark {nxt}"), neg),
            Some((v, m)) => Cond { kind: CondKind::Mark(v, m), negated: neg },
        });
        return i + 2;
    }
    if t == "--mode" && module == "statistic" {
        let (mut prob_text, mut every_text, mut packet_text): (Option<&str>, Option<&str>, Option<&str>) =
            (None, None, None);
        let mut j = i + 2;
        while j + 1 < n && matches!(toks[j].as_ref(), "--probability" | "--every" | "--packet") {
            let v = Some(toks[j + 1].as_ref());
            match toks[j].as_ref() {
                "--probability" => prob_text = v,
                "--every" => every_text = v,
                _ => packet_text = v,
            }
            j += 2;
        }
        let prob = prob_text.and_then(addr::probability);
        let every = addr::number(every_text.unwrap_or(""));
        if nxt == "random" && prob.is_some() {
            conds.push(Cond { kind: CondKind::Random(prob.unwrap_or(0.0)), negated: neg });
        } else if nxt == "nth" && every.is_some_and(|e| e != 0) && addr::number(packet_text.unwrap_or("0")).is_some() {
            conds.push(Cond { kind: CondKind::Nth(every.unwrap_or(1)), negated: neg });
        } else {
            conds.push(unknown(format!("statistic {nxt}"), neg));
        }
        return j;
    }
    if module == "recent" && matches!(t, "--set" | "--rcheck" | "--update" | "--remove") {
        conds.push(Cond { kind: CondKind::Recent(t[2..].to_owned()), negated: neg });
        return i + 1;
    }
    if t == "--match-set" {
        conds.push(Cond { kind: CondKind::Set(nxt.to_owned()), negated: neg });
        return i + 3;
    }
    if module == "physdev" {
        conds.push(Cond { kind: CondKind::Physdev, negated: neg });
        return i + if t == "--physdev-in" || t == "--physdev-out" { 2 } else { 1 };
    }
    conds.push(unknown(t.to_owned(), neg));
    i + 1
}

/// `_mark`: `value[/mask]`.
fn mark(text: &str) -> Option<(u32, u32)> {
    let (v, m) = match text.find('/') {
        Some(i) => (&text[..i], Some(&text[i + 1..])),
        None => (text, None),
    };
    let value = addr::number(v)?;
    let mask = match m {
        Some(m) => addr::number(m)?,
        None => 0xFFFF_FFFF,
    };
    Some((value, mask))
}

/// Python's `s[:k]` on characters.
fn head(s: &str, k: usize) -> &str {
    match s.char_indices().nth(k) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// `_dnat`: `ip`, `ip:port`, `[ip6]:port` (a range keeps its first port).
fn dnat(dest: &str, goto: bool) -> TargetSpec {
    let dnat = known_name("DNAT");
    let (host, port): (&str, &str) = if let Some(rest) = dest.strip_prefix('[') {
        match rest.find("]:") {
            Some(i) => (&rest[..i], &rest[i + 2..]),
            None => (rest, ""),
        }
    } else if dest.matches(':').count() == 1 {
        let i = dest.find(':').unwrap_or(dest.len());
        (&dest[..i], &dest[i + 1..])
    } else {
        (dest, "")
    };
    let span = addr::parse_span(host);
    let to_addr = span.filter(|s| s.1 == s.2).map(|s| s.1);
    let number = if port.is_empty() { None } else { addr::port_number(port.split('-').next().unwrap_or("")) };
    let mut t = TargetSpec::named(dnat, goto);
    if !port.is_empty() && !number.is_some_and(|p| p != 0) {
        t.to_destination = Some((host.into(), None));
        t.problem = Some(format!("DNAT --to-destination {} (port not readable)", head(dest, 80)).into());
        return t;
    }
    t.to_destination = Some((host.into(), number));
    t.to_addr = to_addr;
    t
}

/// `_target`: `-j NAME [--option value | --flag]...`; the next index.
fn target<S: AsRef<str>>(toks: &[S], i: usize, names: &dyn Fn(&str) -> Name) -> (Target, usize) {
    let goto = toks[i].as_ref() == "-g" || toks[i].as_ref() == "--goto";
    let name = names(toks.get(i + 1).map_or("", AsRef::as_ref));
    let mut j = i + 2;
    let mut opts: Vec<(&str, &str)> = Vec::new();
    let mut flags: Vec<&str> = Vec::new();
    while j < toks.len() && toks[j].as_ref().starts_with("--") {
        if j + 1 < toks.len() && !toks[j + 1].as_ref().starts_with("--") {
            let key = toks[j].as_ref();
            opts.retain(|(k, _)| *k != key);
            opts.push((key, toks[j + 1].as_ref()));
            j += 2;
        } else {
            flags.push(toks[j].as_ref());
            j += 1;
        }
    }
    let notrack_name = &*name == "NOTRACK";
    if opts.is_empty() && flags.is_empty() {
        return (Target::Plain { name, goto }, j);
    }
    let opt = |k: &str| opts.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
    let mut t = TargetSpec::named(Name::clone(&name), goto);
    if &*name == "DNAT" {
        if let Some(dest) = opt("--to-destination") {
            let dn = dnat(dest, goto);
            t.to_destination = dn.to_destination;
            t.to_addr = dn.to_addr;
            t.problem = dn.problem;
        }
    }
    if &*name == "MARK" {
        for (op, kind) in [
            ("--set-xmark", MarkOp::SetXmark),
            ("--set-mark", MarkOp::SetMark),
            ("--or-mark", MarkOp::OrMark),
            ("--xor-mark", MarkOp::XorMark),
            ("--and-mark", MarkOp::AndMark),
        ] {
            if let Some(v) = opt(op) {
                match mark(v) {
                    None => t.problem = Some(format!("MARK {op} {} (not a 32-bit value)", head(v, 40)).into()),
                    Some((value, mask)) => t.mark = Some((kind, value, mask)),
                }
            }
        }
    }
    if &*name == "REDIRECT" {
        if let Some(v) = opt("--to-ports") {
            t.to_ports = addr::port_number(v.split('-').next().unwrap_or(""));
            if !t.to_ports.is_some_and(|p| p != 0) {
                t.problem = Some(format!("REDIRECT --to-ports {} (port not readable)", head(v, 40)).into());
            }
        }
    }
    t.notrack = notrack_name || (&*name == "CT" && flags.contains(&"--notrack"));
    (Target::Full(Box::new(t)), j)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<&str> {
        crate::tokens::rule_args(s).unwrap()
    }

    #[test]
    fn service_rules() {
        let r = compile(&toks(
            r#"-A KUBE-SERVICES -d 10.96.0.10/32 -p udp -m comment --comment "kube-system/kube-dns:dns cluster IP" -m udp --dport 53 -j KUBE-SVC-TCOU7JCQXEZGVUNU"#,
        ));
        assert_eq!(r.exact_dst(), Some(0x0a60_000a));
        assert_eq!(r.proto.as_deref(), Some("udp"));
        assert_eq!(r.exact_dport(), Some(53));
        assert_eq!(r.target.as_ref().unwrap().name(), "KUBE-SVC-TCOU7JCQXEZGVUNU");
        let r = compile(&toks("-A KUBE-SVC-X -m statistic --mode random --probability 0.33333333349 -j KUBE-SEP-A"));
        assert_eq!(r.prob, Some(0.33333333349));
        assert!(r.conds.is_empty());
        let r = compile(&toks("-A KUBE-SEP-A -p tcp -m tcp -j DNAT --to-destination 10.244.1.5:8080"));
        let t = r.target.unwrap();
        let t = t.spec().unwrap();
        assert_eq!(t.to_destination, Some(("10.244.1.5".into(), Some(8080))));
        assert_eq!(t.to_addr, Some(0x0af4_0105));
        let r = compile(&toks("-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000"));
        assert_eq!(r.target.unwrap().spec().unwrap().mark, Some((MarkOp::SetXmark, 0x4000, 0x4000)));
        // a quarter of a million are kept at 10,000 Services: no larger than two cache lines
        assert!(std::mem::size_of::<CompiledRule>() <= 128, "{}", std::mem::size_of::<CompiledRule>());
        // one port range inline, no larger than the boxed slice it replaced
        assert!(std::mem::size_of::<Option<Ports>>() <= 16, "{}", std::mem::size_of::<Option<Ports>>());
        // a rule's target and protocol share their names: the chain's, or the process's own
        let r = compile_named(&toks("-A KUBE-SVC-X -p TCP -j KUBE-SEP-A"), &|n| {
            if n == "KUBE-SEP-A" {
                Name::from("KUBE-SEP-A")
            } else {
                known_name(n)
            }
        });
        assert!(Arc::ptr_eq(r.proto.as_ref().unwrap(), &known_name("tcp")));
        assert_eq!(r.target.as_ref().unwrap().name(), "KUBE-SEP-A");
        let r = compile(&toks("-A X -m foo --bar baz -j ACCEPT"));
        assert_eq!(r.conds.len(), 3);
        let r = compile(&toks("-A X -j DNAT --to-destination 10.0.0.1:0x50"));
        assert!(r.target.unwrap().spec().unwrap().problem.as_ref().unwrap().contains("port not readable"));
    }
}
