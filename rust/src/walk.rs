//! A new connection's first packet walked through the node's iptables tables as the kernel
//! would (`kpdoctor/dataplane/iptables/evaluate.py` and `walk.py`, which this mirrors rule for
//! rule): the hooks in order (raw, mangle, nat, then INPUT or FORWARD by the routing decision
//! after DNAT, then POSTROUTING), jumps, gotos, RETURNs and policies. `-m statistic` splits the
//! walk into branches with exact probabilities; a match that cannot be known (an interface not
//! told, an unknown module) is tried both ways, and when the two differ the outcome is
//! uncertain at that rule, never a guess.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};

use pyo3::Python;

use crate::compile::{CompiledRule, CondKind, MarkOp};
use crate::table::Table;

pub const MAX_DEPTH: usize = 64;
pub const MAX_BRANCHES: usize = 4096;
pub const MAX_FORKS: usize = 6;
pub const DROP_MARK: u32 = 0x8000;

/// The first packet of a new connection, as it enters the node.
pub struct Packet {
    pub version: u8,
    pub src: u128,
    pub dst: u128,
    pub proto: String,
    pub dport: u32,
    pub sport: u32,
    pub iif: Option<String>,
    pub oif: Option<String>,
    pub mark: u32,
}

/// A rule the packet took, or (`rule` None) the policy it fell to.
#[derive(Clone, Debug)]
pub struct Step {
    pub layer: u32,
    pub table: u32,
    pub chain: u32,
    pub rule: Option<u32>,
    pub prob: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    Accept,
    Drop,
    Reject,
    Return,
    End,
    Uncertain,
}

impl Verdict {
    pub fn text(self) -> &'static str {
        match self {
            Verdict::Accept => "ACCEPT",
            Verdict::Drop => "DROP",
            Verdict::Reject => "REJECT",
            Verdict::Return => "RETURN",
            Verdict::End => "END",
            Verdict::Uncertain => "UNCERTAIN",
        }
    }

    fn of_policy(policy: &str) -> Verdict {
        match policy {
            "DROP" => Verdict::Drop,
            "REJECT" => Verdict::Reject,
            _ => Verdict::Accept,
        }
    }
}

/// The packet as the walk has changed it, and what happened to it.
#[derive(Clone, Debug)]
pub struct State {
    pub dst: u128,
    pub dport: u32,
    pub mark: u32,
    pub steps: Vec<Step>,
    pub dnat: Option<(String, Option<u32>)>,
    pub masquerade: bool,
    pub notrack: bool,
    pub affinity: Vec<i64>,
    /// position in `steps` of the rule that translated the destination
    pub dnat_step: Option<usize>,
    /// the rule that jumped to KUBE-MARK-DROP (the drop mark's cause)
    pub drop_mark_step: Option<Step>,
}

impl State {
    fn start(pkt: &Packet) -> State {
        State {
            dst: pkt.dst,
            dport: pkt.dport,
            mark: pkt.mark,
            steps: Vec::new(),
            dnat: None,
            masquerade: false,
            notrack: false,
            affinity: Vec::new(),
            dnat_step: None,
            drop_mark_step: None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Outcome {
    pub prob: f64,
    pub verdict: Verdict,
    pub state: State,
    pub reason: String,
    /// dropped for kube-proxy's drop mark, by a filter table not given
    pub by_mark: bool,
    /// uncertain only because this table was not given
    pub open_table: Option<&'static str>,
    /// the one step of an outcome uncertain at an undecidable rule (its text is cited stripped)
    pub undecided_step: bool,
}

impl Outcome {
    fn new(prob: f64, verdict: Verdict, state: State, reason: String) -> Outcome {
        Outcome { prob, verdict, state, reason, by_mark: false, open_table: None, undecided_step: false }
    }

    /// `ip:port` the packet was DNATed to (the packet's own port when the rule named none).
    pub fn endpoint(&self, pkt: &Packet) -> Option<String> {
        let (host, port) = self.state.dnat.as_ref()?;
        let port = port.unwrap_or(pkt.dport);
        Some(if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") })
    }
}

/// Which part of a chain a walk read (`Dep` in evaluate.py): all of it, or, in an indexed
/// chain, what every packet sees and the rules its key selects.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Part {
    Whole,
    Star,
    /// (indexed by destination address?, the packet's key)
    Key(bool, u128),
}

/// What a walk looked at: a table of a layer (`chain` None: whether the table exists), a
/// chain, a part of it. A result the agent carries over depends on these only.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Dep {
    pub layer: u32,
    pub table: String,
    pub chain: Option<String>,
    pub part: Part,
}

pub type Deps = RefCell<HashSet<Dep>>;

/// Why a walk stopped short: a rule it cannot decide (tried both ways by the caller), or
/// branches that multiply beyond what the rules account for.
enum Stop {
    Undecided { key: u64, line: i64, reason: String, step: Step },
    TooMany(String),
}

type Res = (f64, State, Verdict, String);
type Branch = (f64, State);

/// One address family's tables in every layer (the first is the primary set of rules; the
/// others, the other iptables backend's, are passed through too) and the node's addresses.
pub struct Rules {
    pub layers: Vec<Vec<Table>>,
    local: HashSet<(u8, u128)>,
    has_filter: bool,
    max_branches: usize,
}

struct Walk<'a> {
    py: Python<'a>,
    rules: &'a Rules,
    pkt: &'a Packet,
    forced: &'a HashMap<u64, bool>,
    deps: Option<&'a Deps>,
    /// probabilistic splits so far: a chain that jumps to itself twice doubles its paths at
    /// every level, so every split counts against one bound for the whole walk
    splits: Cell<usize>,
}

/// Python's `f"{n:,}"`.
fn grouped(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn in_ranges(port: u32, ranges: &[(u32, u32)]) -> bool {
    ranges.iter().any(|&(lo, hi)| lo <= port && port <= hi)
}

fn apply_mark(mark: u32, op: (MarkOp, u32, u32)) -> u32 {
    let (kind, v, m) = op;
    match kind {
        MarkOp::SetXmark => (mark & !m) ^ v,
        MarkOp::SetMark => {
            if m != 0xFFFF_FFFF {
                (mark & !m) | v
            } else {
                v
            }
        }
        MarkOp::OrMark => mark | v,
        MarkOp::XorMark => mark ^ v,
        MarkOp::AndMark => mark & v,
    }
}

fn is_builtin(chain: &str) -> bool {
    matches!(chain, "PREROUTING" | "INPUT" | "FORWARD" | "OUTPUT" | "POSTROUTING")
}

/// Python's `round(x, digits)`: the exact binary value rounded half to even, read back.
pub fn round_to(x: f64, digits: usize) -> f64 {
    format!("{x:.digits$}").parse().unwrap_or(x)
}

/// Python's `round(x, 9)` as a comparable key (both round the exact binary value half to even).
fn round9(x: f64) -> String {
    format!("{x:.9}")
}

fn signature(outcomes: &[Outcome], pkt: &Packet) -> Vec<(Verdict, String, String)> {
    let mut sig: Vec<_> = outcomes
        .iter()
        .map(|o| (o.verdict, o.endpoint(pkt).unwrap_or_default(), round9(o.prob)))
        .collect();
    sig.sort_by(|a, b| (a.0.text(), &a.1, &a.2).cmp(&(b.0.text(), &b.1, &b.2)));
    sig
}

impl Rules {
    pub fn new(layers: Vec<Vec<Table>>, local: HashSet<(u8, u128)>) -> Rules {
        let has_filter = layers.iter().any(|l| l.iter().any(|t| t.name == "filter"));
        let size: usize = layers.iter().flat_map(|l| l.iter().map(Table::size)).sum();
        Rules { layers, local, has_filter, max_branches: MAX_BRANCHES + size }
    }

    /// Every outcome of a new connection entering at `prerouting` or `output`, and which
    /// undecidable rules did not matter (`walk_packet` and `run_forked`).
    /// `deps`: when given, every part of the rules the walk reads is added to it.
    /// `py`: rules are compiled from the Python parser's text the first time a walk enters
    /// their chain.
    pub fn run(&self, py: Python<'_>, pkt: &Packet, prerouting: bool, postrouting: bool, deps: Option<&Deps>) -> (Vec<Outcome>, Vec<String>) {
        let mut forced = HashMap::new();
        let mut undecided = Vec::new();
        match self.forked(py, pkt, (prerouting, postrouting), deps, &mut forced, &mut undecided, 0) {
            Ok(out) => (out, undecided),
            Err(msg) => {
                (vec![Outcome::new(1.0, Verdict::Uncertain, State::start(pkt), msg)], undecided)
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn forked(
        &self,
        py: Python<'_>,
        pkt: &Packet,
        (prerouting, postrouting): (bool, bool),
        deps: Option<&Deps>,
        forced: &mut HashMap<u64, bool>,
        undecided: &mut Vec<String>,
        depth: usize,
    ) -> Result<Vec<Outcome>, String> {
        let walk = Walk { py, rules: self, pkt, forced, deps, splits: Cell::new(0) };
        match walk.once(prerouting, postrouting) {
            Ok(out) => Ok(out),
            Err(Stop::TooMany(msg)) => Err(msg),
            Err(Stop::Undecided { key, line, reason, step }) => {
                let uncertain_at = || {
                    let mut st = State::start(pkt);
                    st.steps.push(step.clone());
                    let mut o = Outcome::new(
                        1.0,
                        Verdict::Uncertain,
                        st,
                        format!("{reason} at line {line}, and it decides the outcome"),
                    );
                    o.undecided_step = true;
                    vec![o]
                };
                if depth >= MAX_FORKS {
                    return Ok(uncertain_at());
                }
                forced.insert(key, true);
                let taken = self.forked(py, pkt, (prerouting, postrouting), deps, forced, undecided, depth + 1)?;
                forced.insert(key, false);
                let not_taken = self.forked(py, pkt, (prerouting, postrouting), deps, forced, undecided, depth + 1)?;
                forced.remove(&key);
                if signature(&taken, pkt) == signature(&not_taken, pkt) {
                    undecided.push(format!("line {line} ({reason})"));
                    return Ok(not_taken);
                }
                Ok(uncertain_at())
            }
        }
    }

    fn is_local(&self, version: u8, addr: u128) -> bool {
        if self.local.contains(&(version, addr)) {
            return true;
        }
        if version == 4 {
            addr >> 24 == 127
        } else {
            addr == 1
        }
    }
}

impl Walk<'_> {
    fn once(&self, prerouting: bool, postrouting: bool) -> Result<Vec<Outcome>, Stop> {
        let entry = if prerouting { "PREROUTING" } else { "OUTPUT" };
        let mut branches: Vec<Branch> = vec![(1.0, State::start(self.pkt))];
        let mut finals: Vec<Outcome> = Vec::new();
        for table in ["raw", "mangle", "nat"] {
            branches = self.hook(table, entry, branches, &mut finals)?;
        }
        let mut after: Vec<Branch> = Vec::new();
        for (p, st) in branches {
            self.after_nat(prerouting, postrouting, p, st, &mut after, &mut finals)?;
        }
        for (p, st) in after {
            finals.push(self.passed(p, st));
        }
        Ok(finals)
    }

    /// A packet no rule given stopped (see `Evaluator._passed`).
    fn passed(&self, p: f64, st: State) -> Outcome {
        if self.rules.has_filter {
            return Outcome::new(p, Verdict::Accept, st, String::new());
        }
        if st.mark & DROP_MARK == DROP_MARK {
            let why = "kube-proxy's drop mark 0x8000 (KUBE-MARK-DROP) is set: dropped by mark (filter table not given)";
            let mut o = Outcome::new(p, Verdict::Drop, st, why.into());
            o.by_mark = true;
            return o;
        }
        if st.dnat.is_none() {
            let why = "not translated, and the filter table (which may accept, reject or drop it) was not given";
            let mut o = Outcome::new(p, Verdict::Uncertain, st, why.into());
            o.open_table = Some("filter");
            return o;
        }
        Outcome::new(p, Verdict::Accept, st, String::new())
    }

    fn stages(prerouting: bool, local: bool, postrouting: bool) -> Vec<(&'static str, &'static str)> {
        if prerouting {
            let route = if local { "INPUT" } else { "FORWARD" };
            let mut out = vec![("mangle", route), ("filter", route)];
            if !local {
                out.push(("mangle", "POSTROUTING"));
                if postrouting {
                    out.push(("nat", "POSTROUTING"));
                }
            }
            return out;
        }
        let mut out = vec![("filter", "OUTPUT"), ("mangle", "POSTROUTING")];
        if postrouting {
            out.push(("nat", "POSTROUTING"));
        }
        if local {
            out.push(("filter", "INPUT"));
        }
        out
    }

    /// Filter, mangle and postrouting for one branch, walked from a clean copy and merged back
    /// as `Evaluator._after_nat` merges its memoised walk (steps, affinity, mark, masquerade).
    fn after_nat(
        &self,
        prerouting: bool,
        postrouting: bool,
        p: f64,
        st: State,
        after: &mut Vec<Branch>,
        finals: &mut Vec<Outcome>,
    ) -> Result<(), Stop> {
        let local = self.rules.is_local(self.pkt.version, st.dst);
        let mut probe = st.clone();
        probe.steps.clear();
        probe.affinity.clear();
        probe.masquerade = false;
        let mut sub_finals: Vec<Outcome> = Vec::new();
        let mut branches: Vec<Branch> = vec![(1.0, probe)];
        for (table, chain) in Self::stages(prerouting, local, postrouting) {
            branches = self.hook(table, chain, branches, &mut sub_finals)?;
        }
        let mut cached: Vec<(f64, Option<Verdict>, String, State)> =
            sub_finals.into_iter().map(|o| (o.prob, Some(o.verdict), o.reason, o.state)).collect();
        cached.extend(branches.into_iter().map(|(q, s)| (q, None, String::new(), s)));
        if cached.len() == 1 {
            let (q, verdict, _, s2) = &cached[0];
            if verdict.is_none() && s2.steps.is_empty() && s2.affinity.is_empty() && s2.mark == st.mark && !s2.masquerade
            {
                after.push((p * q, st));
                return Ok(());
            }
        }
        for (q, verdict, reason, s2) in cached {
            let mut out = st.clone();
            out.steps.extend(s2.steps.iter().map(|x| Step { prob: x.prob * p, ..x.clone() }));
            out.affinity.extend(s2.affinity.iter().copied());
            out.mark = s2.mark;
            out.masquerade = out.masquerade || s2.masquerade;
            match verdict {
                Some(v) => finals.push(Outcome::new(p * q, v, out, reason)),
                None => after.push((p * q, out)),
            }
        }
        Ok(())
    }

    /// A built-in chain of one table, in every layer: the branches that go on.
    fn hook(&self, table: &str, chain: &str, mut branches: Vec<Branch>, finals: &mut Vec<Outcome>) -> Result<Vec<Branch>, Stop> {
        for (li, layer) in self.rules.layers.iter().enumerate() {
            let found = layer.iter().enumerate().find(|(_, t)| t.name == table);
            self.read(li as u32, table, found.map(|_| chain), Part::Whole);
            let Some((ti, tab)) = found else { continue };
            let Some(cid) = tab.find(chain) else { continue };
            let mut out: Vec<Branch> = Vec::new();
            for (p, st) in branches {
                if table == "nat" && st.notrack {
                    out.push((p, st));
                    continue;
                }
                for (q, s2, verdict, reason) in self.chain(li as u32, ti as u32, cid, p, st, 0)? {
                    match verdict {
                        Verdict::Accept | Verdict::Return | Verdict::End => out.push((q, s2)),
                        _ => finals.push(Outcome::new(q, verdict, s2, reason)),
                    }
                }
                let limit = self.rules.max_branches;
                if out.len() > limit {
                    return Err(Stop::TooMany(format!(
                        "more than {} paths through {table} {chain}: rules whose probabilistic branches multiply are not evaluated",
                        grouped(limit)
                    )));
                }
            }
            branches = out;
        }
        Ok(branches)
    }

    /// Note a part of the rules this walk read (when reads are recorded).
    fn read(&self, layer: u32, table: &str, chain: Option<&str>, part: Part) {
        if let Some(deps) = self.deps {
            deps.borrow_mut().insert(Dep { layer, table: table.to_owned(), chain: chain.map(str::to_owned), part });
        }
    }

    fn table(&self, layer: u32, table: u32) -> &Table {
        &self.rules.layers[layer as usize][table as usize]
    }

    fn chain(&self, layer: u32, ti: u32, cid: u32, p: f64, st: State, depth: usize) -> Result<Vec<Res>, Stop> {
        let tab = self.table(layer, ti);
        if depth > MAX_DEPTH {
            let why = format!("chain nesting deeper than {MAX_DEPTH} at {}/{}", tab.name, tab.chains[cid as usize].name);
            return Ok(vec![(p, st, Verdict::Uncertain, why)]);
        }
        let compiled = tab.compiled(self.py, cid);
        let key = compiled.index.as_ref().map(|idx| (idx.by_dst, if idx.by_dst { st.dst } else { st.dport as u128 }));
        if self.deps.is_some() {
            let name = &*tab.chains[cid as usize].name;
            match key {
                Some((by_dst, k)) => {
                    self.read(layer, &tab.name, Some(name), Part::Key(by_dst, k));
                    self.read(layer, &tab.name, Some(name), Part::Star);
                }
                None => self.read(layer, &tab.name, Some(name), Part::Whole),
            }
        }
        let order = compiled.index.as_ref().zip(key).map(|(idx, (_, k))| idx.positions(k));
        self.rules_from(layer, ti, cid, order.as_deref(), p, st, depth)
    }

    /// Every branch of `st` through one chain (`Evaluator._rules`): branches that go on in this
    /// chain wait on a stack, taken in the order recursion would take them.
    #[allow(clippy::too_many_arguments)]
    fn rules_from(&self, layer: u32, ti: u32, cid: u32, order: Option<&[u32]>, p: f64, st: State, depth: usize) -> Result<Vec<Res>, Stop> {
        let tab = self.table(layer, ti);
        let chain_name = &*tab.chains[cid as usize].name;
        let compiled = tab.compiled(self.py, cid);
        let rules = &compiled.rules;
        let mut results: Vec<Res> = Vec::new();
        let end = order.map_or(rules.len(), <[u32]>::len);
        let mut todo: Vec<(usize, f64, State, bool)> = vec![(0, p, st, false)];
        let step = |at: u32, p: f64, rule: Option<u32>| Step { layer, table: ti, chain: at, rule, prob: p };
        while let Some((mut pos, mut p, mut st, mut matched)) = todo.pop() {
            let fell: Option<State> = loop {
                if pos >= end {
                    break Some(st);
                }
                let (idx, r) = {
                    let k = order.map_or(pos, |o| o[pos] as usize);
                    let (idx, r) = &rules[k];
                    (*idx, r)
                };
                let line = tab.rules[idx as usize].line;
                if !matched {
                    if !self.fields_match(r, &st) {
                        pos += 1;
                        continue;
                    }
                    let pm = if r.conds.is_empty() { r.prob } else { Some(self.conds_match(layer, ti, cid, idx, r, p, &mut st, line)?) };
                    if let Some(pm) = pm {
                        if pm <= 0.0 {
                            pos += 1;
                            continue;
                        }
                        if pm < 1.0 {
                            self.splits.set(self.splits.get() + 1);
                            let limit = self.rules.max_branches;
                            if self.splits.get() > limit {
                                return Err(Stop::TooMany(format!(
                                    "more than {} paths through {} {chain_name}: rules whose probabilistic branches multiply are not evaluated",
                                    grouped(limit),
                                    tab.name
                                )));
                            }
                            todo.push((pos, p * pm, st.clone(), true));
                            p *= 1.0 - pm;
                            pos += 1;
                            continue;
                        }
                    }
                }
                matched = false;
                let Some(tgt) = &r.target else {
                    pos += 1;
                    continue;
                };
                let name = tgt.name();
                let spec = tgt.spec();
                if matches!(name, "DROP" | "REJECT" | "DNAT" | "REDIRECT") {
                    st.steps.push(step(cid, p, Some(idx)));
                }
                if name == "KUBE-MARK-DROP" {
                    st.drop_mark_step = Some(step(cid, p, Some(idx)));
                }
                let verdict = match name {
                    "ACCEPT" => Some(Verdict::Accept),
                    "DROP" => Some(Verdict::Drop),
                    "REJECT" => Some(Verdict::Reject),
                    "RETURN" => Some(Verdict::Return),
                    _ => None,
                };
                if let Some(v) = verdict {
                    results.push((p, st, v, String::new()));
                    break None;
                }
                if let Some(problem) = spec.and_then(|t| t.problem.as_ref()) {
                    results.push((p, st, Verdict::Uncertain, format!("cannot read {problem} at line {line}")));
                    break None;
                }
                if let (true, Some(t)) = (name == "DNAT", spec) {
                    if let Some((host, port)) = &t.to_destination {
                        let Some(addr) = t.to_addr else {
                            results.push((p, st, Verdict::Uncertain, format!("DNAT to {host} at line {line}")));
                            break None;
                        };
                        st.dst = addr;
                        st.dport = port.filter(|&x| x != 0).unwrap_or(st.dport);
                        st.dnat = Some((host.to_string(), *port));
                        st.dnat_step = Some(st.steps.len() - 1);
                        results.push((p, st, Verdict::Accept, String::new()));
                        break None;
                    }
                }
                if name == "REDIRECT" {
                    let v4 = self.pkt.version == 4;
                    st.dst = if v4 { 0x7F00_0001 } else { 1 };
                    let to_ports = spec.and_then(|t| t.to_ports);
                    st.dport = to_ports.filter(|&x| x != 0).unwrap_or(st.dport);
                    st.dnat = Some((if v4 { "127.0.0.1" } else { "::1" }.to_owned(), to_ports));
                    st.dnat_step = st.steps.len().checked_sub(1);
                    results.push((p, st, Verdict::Accept, String::new()));
                    break None;
                }
                if name == "MASQUERADE" || name == "SNAT" {
                    st.masquerade = true;
                    results.push((p, st, Verdict::Accept, String::new()));
                    break None;
                }
                if name == "MARK" {
                    if let Some(op) = spec.and_then(|t| t.mark) {
                        st.mark = apply_mark(st.mark, op);
                        pos += 1;
                        continue;
                    }
                }
                if tgt.notrack() {
                    st.notrack = true;
                    pos += 1;
                    continue;
                }
                if matches!(name, "LOG" | "NFLOG" | "TRACE" | "CONNMARK" | "CT" | "NFQUEUE_BYPASS") {
                    pos += 1;
                    continue;
                }
                let Some(next) = tab.find(name) else {
                    self.read(layer, &tab.name, Some(name), Part::Whole);
                    results.push((p, st, Verdict::Uncertain, format!("unknown target {name} at line {line}")));
                    break None;
                };
                let mut back: Vec<(usize, f64, State, bool)> = Vec::new();
                for (q, s2, verdict, reason) in self.chain(layer, ti, next, p, st, depth + 1)? {
                    if matches!(verdict, Verdict::Return | Verdict::End) {
                        if tgt.goto() {
                            results.push((q, s2, Verdict::Return, String::new()));
                        } else {
                            back.push((pos + 1, q, s2, false));
                        }
                    } else {
                        results.push((q, s2, verdict, reason));
                    }
                }
                todo.extend(back.into_iter().rev());
                break None;
            };
            if let Some(mut st) = fell {
                if is_builtin(chain_name) {
                    let policy = tab.policies.get(chain_name).map_or("ACCEPT", String::as_str);
                    let verdict = Verdict::of_policy(policy);
                    if matches!(policy, "DROP" | "REJECT") {
                        st.steps.push(step(cid, p, None));
                    }
                    results.push((p, st, verdict, String::new()));
                } else {
                    results.push((p, st, Verdict::End, String::new()));
                }
            }
        }
        Ok(results)
    }

    /// `-d`, `-s`, `-p`, `--dport`: the matches most rules fail on.
    fn fields_match(&self, r: &CompiledRule, st: &State) -> bool {
        let v = self.pkt.version;
        if let Some(net) = &r.dst {
            if net.contains(v, st.dst) == r.dst_neg {
                return false;
            }
        }
        if let Some(net) = &r.src {
            if net.contains(v, self.pkt.src) == r.src_neg {
                return false;
            }
        }
        if let Some(pr) = &r.proto {
            if (**pr == *self.pkt.proto || &**pr == "all") == r.proto_neg {
                return false;
            }
        }
        if let Some(dp) = &r.dport {
            if in_ranges(st.dport, dp.ranges()) == r.dport_neg {
                return false;
            }
        }
        true
    }

    /// The probability that the rule's further conditions hold; an undecidable one stops the
    /// walk unless the caller has forced it one way.
    #[allow(clippy::too_many_arguments)]
    fn conds_match(&self, layer: u32, ti: u32, cid: u32, idx: u32, r: &CompiledRule, p: f64, st: &mut State, line: i64) -> Result<f64, Stop> {
        let key = (u64::from(layer) << 56) | (u64::from(ti) << 40) | u64::from(idx);
        match self.match_all(r, st, line) {
            Ok(v) => Ok(v),
            Err(reason) => match self.forced.get(&key) {
                None => Err(Stop::Undecided {
                    key,
                    line,
                    reason,
                    step: Step { layer, table: ti, chain: cid, rule: Some(idx), prob: p },
                }),
                Some(true) => Ok(self.match_rest(r, st)),
                Some(false) => Ok(0.0),
            },
        }
    }

    fn match_all(&self, r: &CompiledRule, st: &mut State, line: i64) -> Result<f64, String> {
        let mut prob = 1.0;
        for c in &r.conds {
            if let CondKind::Recent(how) = &c.kind {
                if (how == "rcheck" || how == "update") && !st.affinity.contains(&line) {
                    st.affinity.push(line);
                }
            }
            let v = self.cond(&c.kind, st)?;
            if matches!(c.kind, CondKind::Random(_) | CondKind::Nth(_)) {
                prob *= if c.negated { 1.0 - v } else { v };
                continue;
            }
            if (v != 0.0) == c.negated {
                return Ok(0.0);
            }
        }
        Ok(prob)
    }

    /// The rule's match probability with its undecidable conditions taken as true.
    fn match_rest(&self, r: &CompiledRule, st: &State) -> f64 {
        let mut prob = 1.0;
        for c in &r.conds {
            let Ok(v) = self.cond(&c.kind, st) else { continue };
            if matches!(c.kind, CondKind::Random(_) | CondKind::Nth(_)) {
                prob *= if c.negated { 1.0 - v } else { v };
            } else if (v != 0.0) == c.negated {
                return 0.0;
            }
        }
        prob
    }

    fn cond(&self, kind: &CondKind, st: &State) -> Result<f64, String> {
        let v = self.pkt.version;
        let yes = |b: bool| if b { 1.0 } else { 0.0 };
        match kind {
            CondKind::Addrtype(src, typ) => {
                let addr = if *src { self.pkt.src } else { st.dst };
                match typ.as_str() {
                    "LOCAL" => Ok(yes(self.rules.is_local(v, addr))),
                    "UNICAST" => Ok(yes(!if v == 4 { addr >> 28 == 0xE } else { addr >> 120 == 0xFF })),
                    _ => Err(format!("address type {typ} not known")),
                }
            }
            CondKind::Mark(value, mask) => Ok(yes(st.mark & mask == *value)),
            CondKind::Ctstate(states) => {
                Ok(yes(states.iter().any(|s| s == "NEW" || (st.dnat.is_some() && s == "DNAT"))))
            }
            CondKind::Random(p) => Ok(*p),
            CondKind::Nth(every) => Ok(1.0 / f64::from(*every)),
            CondKind::Recent(how) => Ok(yes(how == "set")),
            CondKind::Sport(ranges) => Ok(yes(in_ranges(self.pkt.sport, ranges))),
            CondKind::Iif(pat) | CondKind::Oif(pat) => {
                let iif = matches!(kind, CondKind::Iif(_));
                let name = if iif { &self.pkt.iif } else { &self.pkt.oif };
                let Some(name) = name else {
                    return Err(format!("interface match {} {pat} (interface not known)", if iif { "-i" } else { "-o" }));
                };
                Ok(yes(match pat.strip_suffix('+') {
                    Some(prefix) => name.starts_with(prefix),
                    None => name == pat,
                }))
            }
            CondKind::Set(name) => Err(format!("ipset {name} not given")),
            CondKind::Physdev => Err("physdev match not evaluated".into()),
            CondKind::Unknown(what) => Err(format!("match {what} not evaluated")),
        }
    }
}
