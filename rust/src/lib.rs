//! `kpdoctor._core`: the dataplane's hot path in Rust. Python stays the front (facts, checks,
//! reports); this module holds one address family's iptables rules compiled once and walks
//! packets through them (`kpdoctor/dataplane/iptables/native.py` is its only caller).

mod addr;
mod cluster;
mod compile;
mod save;
mod share;
mod state;
mod table;
mod tokens;
mod walk;

use std::collections::HashSet;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString, PyTuple};

use crate::save::{RuleLines, SavedRules};
use crate::state::RulesState;
use crate::table::{RawRule, Source, Table};
use crate::walk::{Outcome, Packet, Rules, Step};

/// One iptables table as Python hands it over: its name, its chains with their policies (None
/// for a user chain), and its rules: either as the dump holds them (`SavedRules`: `scan_save`'s
/// reading of a whole dump) or per rule (in the dump's order) its chain, line and text without
/// counters, with the `kpdoctor.parse.iptables.Rule` objects themselves, whose Python-made
/// tokens are taken for the rare line only a shell-word parser splits right.
#[derive(FromPyObject)]
enum TableIn<'py> {
    Saved((String, Declared, Bound<'py, SavedRules>)),
    Listed((String, Declared, Bound<'py, PyList>, Vec<i64>, Bound<'py, PyList>, Bound<'py, PyList>)),
}

/// A table's chains and their policies (None for a user chain).
type Declared = Vec<(String, Option<String>)>;

fn read_table(table: TableIn<'_>) -> PyResult<Table> {
    let (name, declared, chains, lines, texts, objects) = match table {
        TableIn::Saved((name, declared, saved)) => {
            let mut t = Table::new(name, declared, saved.get().len());
            saved.get().fill(saved.py(), &mut t)?;
            return Ok(t);
        }
        TableIn::Listed(listed) => listed,
    };
    let n = chains.len();
    if lines.len() != n || texts.len() != n || objects.len() != n {
        return Err(PyValueError::new_err("a table's chains, lines, texts and rules differ in number"));
    }
    let py = objects.py();
    let mut t = Table::new(name, declared, n);
    for (i, ((chain, line), text)) in chains.iter().zip(lines).zip(texts.iter()).enumerate() {
        let chain = chain.cast_into::<PyString>()?;
        let text = text.cast_into::<PyString>()?;
        // text that is not UTF-8 (bytes the reader kept as surrogate escapes) is refused: the
        // caller walks such a dump with the Python evaluator
        let (Ok(c), Ok(txt)) = (chain.to_str(), text.to_str()) else {
            return Err(PyValueError::new_err(format!("line {line} is not UTF-8")));
        };
        // a line only a shell-word parser splits right: the Python parser's tokens
        let source = if tokens::needs_shell(txt) {
            Source::Args(objects.get_item(i)?.getattr(pyo3::intern!(py, "args"))?.extract::<Vec<String>>()?.into())
        } else {
            Source::Text(text.clone().unbind())
        };
        t.push(c, RawRule { line, source });
    }
    Ok(t)
}

/// One address family's iptables rules, compiled on first use, ready to walk.
#[pyclass(frozen, module = "kpdoctor._core")]
struct IptablesRules {
    rules: Rules,
}

fn step_tuple<'py>(py: Python<'py>, rules: &Rules, s: &Step) -> PyResult<Bound<'py, PyTuple>> {
    let tab = &rules.layers[s.layer as usize][s.table as usize];
    let chain: &str = &tab.chains[s.chain as usize].name;
    (s.layer, s.table, chain, s.rule, s.prob).into_pyobject(py)
}

/// A verdict's name, one Python string per name (a verification reads 100,000 of them).
fn verdict_text(py: Python<'_>, v: walk::Verdict) -> Bound<'_, PyString> {
    match v {
        walk::Verdict::Accept => pyo3::intern!(py, "ACCEPT"),
        walk::Verdict::Drop => pyo3::intern!(py, "DROP"),
        walk::Verdict::Reject => pyo3::intern!(py, "REJECT"),
        walk::Verdict::Return => pyo3::intern!(py, "RETURN"),
        walk::Verdict::End => pyo3::intern!(py, "END"),
        walk::Verdict::Uncertain => pyo3::intern!(py, "UNCERTAIN"),
    }
    .clone()
}

fn outcome_tuple<'py>(py: Python<'py>, rules: &Rules, o: &Outcome) -> PyResult<Bound<'py, PyTuple>> {
    let st = &o.state;
    let steps = PyList::empty(py);
    for s in &st.steps {
        steps.append(step_tuple(py, rules, s)?)?;
    }
    let drop_mark = st.drop_mark_step.as_ref().map(|s| step_tuple(py, rules, s)).transpose()?;
    let head = (o.prob, o.verdict.text(), o.reason.as_str(), o.by_mark, o.open_table, o.undecided_step);
    let state = (st.dnat.clone(), st.dst, st.dport, st.mark, st.masquerade, st.notrack, st.affinity.clone());
    (head, state, steps, st.dnat_step, drop_mark).into_pyobject(py)
}

#[pymethods]
impl IptablesRules {
    /// `layers`: the primary set of tables first, then the other backend's that the kernel runs
    /// at the same hooks; `local`: the node's own addresses as (IP version, integer).
    #[new]
    fn new(layers: Vec<Vec<TableIn<'_>>>, local: Vec<(u8, u128)>) -> PyResult<Self> {
        let mut out = Vec::with_capacity(layers.len());
        for layer in layers {
            out.push(layer.into_iter().map(read_table).collect::<PyResult<Vec<_>>>()?);
        }
        Ok(IptablesRules { rules: Rules::new(out, local.into_iter().collect::<HashSet<_>>()) })
    }

    /// Every outcome of a new connection's first packet entering at `hook` (prerouting or
    /// output), and the undecidable rules that did not matter. Each outcome:
    /// `((probability, verdict, reason, by_mark, open_table, undecided_step),
    ///   (dnat, dst, dport, mark, masquerade, notrack, affinity), steps, dnat_step, drop_mark_step)`
    /// with each step `(layer, table, chain, rule or None for the policy, probability)`.
    fn run<'py>(&self, py: Python<'py>, packet: PacketIn, hook: &str, postrouting: bool) -> PyResult<(Bound<'py, PyList>, Vec<String>)> {
        let prerouting = prerouting(hook)?;
        let pkt = packet_of(packet);
        let (outcomes, undecided) = self.rules.run(py, &pkt, prerouting, postrouting, None);
        let out = PyList::empty(py);
        for o in &outcomes {
            out.append(outcome_tuple(py, &self.rules, o)?)?;
        }
        Ok((out, undecided))
    }

    /// Which cases the rules certainly handle as the cluster expects, walked and judged here in
    /// one pass: per case `(packet, prerouting, alternatives)`, `alternatives` an index into
    /// `alternatives` (cases of one Service port share theirs). True: the walk is decided and
    /// reaches one of the case's alternatives (the verification's status "ok"); False: anything
    /// else, which the caller evaluates in full.
    fn settled(&self, py: Python<'_>, cases: Vec<(PacketIn, bool, usize)>, alternatives: Vec<Vec<AlternativeIn>>) -> PyResult<Vec<bool>> {
        let mut out = Vec::with_capacity(cases.len());
        for (packet, prerouting, which) in cases {
            let Some(alts) = alternatives.get(which) else {
                return Err(PyValueError::new_err(format!("no alternatives {which}")));
            };
            let pkt = packet_of(packet);
            let (outcomes, _) = self.rules.run(py, &pkt, prerouting, false, None);
            out.push(reaches_alternative(&outcomes, &ordered(&outcomes, &pkt), alts));
        }
        Ok(out)
    }

    /// What the tables of layer `layer` hold, as fingerprints of the parts a walk reads
    /// (`RulesState`: the agent compares it with the previous cycle's).
    fn state(&self, py: Python<'_>, layer: usize) -> PyResult<RulesState> {
        match self.rules.layers.get(layer) {
            Some(tables) => Ok(RulesState::of(py, tables)),
            None => Err(PyValueError::new_err(format!("no layer {layer}"))),
        }
    }

    /// The name of a chain a step of `entries` names by its indices.
    fn chain_name(&self, layer: u32, table: u32, chain: u32) -> PyResult<String> {
        let tab = self.rules.layers.get(layer as usize).and_then(|l| l.get(table as usize));
        match tab.and_then(|t| t.chains.get(chain as usize)) {
            Some(ch) => Ok(ch.name.to_string()),
            None => Err(PyValueError::new_err("no such chain")),
        }
    }

    /// The primary rules of `table` that match one destination port of one protocol (neither
    /// negated), in the dump's order: where a destination no Service owns may still be
    /// forwarded (the stale-rule search). Only lines that name a destination port are compiled.
    fn port_rules(&self, py: Python<'_>, table: &str) -> Vec<PortRule> {
        let Some(tab) = self.rules.layers.first().and_then(|l| l.iter().find(|t| t.name == table)) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut take = |idx: u32, cr: &compile::CompiledRule| {
            if let (Some(port), Some(proto), false) = (cr.exact_dport(), &cr.proto, cr.proto_neg) {
                out.push((idx, port, proto.to_string(), cr.dst.as_ref().map(addr::Net::span), cr.dst_neg));
            }
        };
        for cid in 0..tab.chains.len() as u32 {
            let named: Vec<u32> = tab.chain_members(cid).iter().copied().filter(|&i| tab.names_dport(py, i)).collect();
            if named.is_empty() {
                continue;
            }
            if tab.chain_members(cid).len() > table::INDEX_THRESHOLD {
                // a long chain is kept compiled anyway (KUBE-SERVICES, KUBE-NODEPORTS)
                for (idx, cr) in &tab.compiled(py, cid).rules {
                    if named.binary_search(idx).is_ok() {
                        take(*idx, cr);
                    }
                }
            } else {
                // a Service's chain: only its rules that name a port, without compiling (and
                // keeping) the whole chain
                for idx in named {
                    take(idx, &tab.compile_one(py, idx));
                }
            }
        }
        out.sort_by_key(|r| r.0);
        out
    }

    /// What a verification reads of a walk, most likely first (`merge_outcomes`' order): per
    /// outcome `(probability, verdict, reason, backend, cited step or None, open_table)`, the
    /// cited step being the DNAT rule of an accepted and translated packet, else the rule or
    /// policy that decided, as `(layer, table, chain, rule or None for the policy)` (indices:
    /// `chain_name` names the chain); the undecidable rules that did not matter; and, with `reads`, every
    /// part of the rules the walk read, `(layer, table, chain or None, part)` with part None
    /// (the whole chain), `"*"` or `("dst" | "dport", key)` (an indexed chain's).
    #[pyo3(signature = (packet, hook, reads=false))]
    fn entries<'py>(&self, py: Python<'py>, packet: PacketIn, hook: &str, reads: bool) -> PyResult<Entries<'py>> {
        let prerouting = prerouting(hook)?;
        let pkt = packet_of(packet);
        let deps: Option<walk::Deps> = reads.then(Default::default);
        let (outcomes, undecided) = self.rules.run(py, &pkt, prerouting, false, deps.as_ref());
        let deps = deps.map(walk::Deps::into_inner);
        let out = PyList::empty(py);
        for (i, backend) in ordered(&outcomes, &pkt) {
            let o = &outcomes[i];
            let st = &o.state;
            let cited = if o.verdict == walk::Verdict::Accept {
                if st.dnat.is_some() { st.dnat_step.map(|k| &st.steps[k]) } else { None }
            } else if o.by_mark && st.drop_mark_step.is_some() {
                st.drop_mark_step.as_ref()
            } else {
                st.steps.last()
            };
            // the step as numbers only: the caller reads each rule's citation once
            let cited = cited.map(|s| (s.layer, s.table, s.chain, s.rule));
            let reason = if o.reason.is_empty() { pyo3::intern!(py, "").clone() } else { PyString::new(py, &o.reason) };
            out.append((o.prob, verdict_text(py, o.verdict), reason, backend, cited, o.open_table).into_pyobject(py)?)?;
        }
        let read = match deps {
            None => None,
            Some(deps) => {
                let list = PyList::empty(py);
                for d in deps {
                    list.append((d.layer, d.table, d.chain, part_object(py, &d.part)?))?;
                }
                Some(list)
            }
        };
        Ok((out, undecided, read))
    }
}

/// A part of a chain as Python names it: None (the whole chain), `"*"` (what every packet of
/// an indexed chain sees) or `("dst" | "dport", key)` (the rules an index key gives).
fn part_object<'py>(py: Python<'py>, part: &walk::Part) -> PyResult<Bound<'py, PyAny>> {
    Ok(match part {
        walk::Part::Whole => py.None().into_bound(py),
        walk::Part::Star => pyo3::intern!(py, "*").clone().into_any(),
        walk::Part::Key(by_dst, k) => (if *by_dst { "dst" } else { "dport" }, *k).into_pyobject(py)?.into_any(),
    })
}

/// The outcomes of a walk as a verification reads them, most likely first (then by verdict and
/// backend: `merge_outcomes`' order), each with the backend it was translated to.
fn ordered(outcomes: &[Outcome], pkt: &Packet) -> Vec<(usize, Option<String>)> {
    let mut keyed: Vec<(usize, f64, Option<String>)> =
        outcomes.iter().enumerate().map(|(i, o)| (i, walk::round_to(o.prob, 7), o.endpoint(pkt))).collect();
    keyed.sort_by(|a, b| {
        b.1.total_cmp(&a.1)
            .then_with(|| outcomes[a.0].verdict.text().cmp(outcomes[b.0].verdict.text()))
            .then_with(|| a.2.as_deref().unwrap_or("").cmp(b.2.as_deref().unwrap_or("")))
    });
    keyed.into_iter().map(|(i, _, backend)| (i, backend)).collect()
}

/// kube-proxy prints probabilities with 10 decimals; equal shares are within this
/// (`PROB_TOLERANCE` in results.py)
const PROB_TOLERANCE: f64 = 1e-3;

/// Whether a decided walk reaches one of a case's alternatives: `results.judge` for a walk
/// with no uncertain outcome, and only its verdict "ok" (anything else is judged in Python, with
/// its notes). An alternative is `(refused, backends)`: refused by the rules, or spread evenly
/// over exactly those backends.
fn reaches_alternative(outcomes: &[Outcome], order: &[(usize, Option<String>)], alternatives: &[AlternativeIn]) -> bool {
    let mut forwarded: Vec<(&str, f64)> = Vec::new();
    let mut refused = 0.0;
    for (i, backend) in order {
        let o = &outcomes[*i];
        match (o.verdict, backend) {
            (walk::Verdict::Uncertain, _) => return false,
            (walk::Verdict::Accept, Some(b)) if !b.is_empty() => match forwarded.iter_mut().find(|(k, _)| k == b) {
                Some(slot) => slot.1 += o.prob,
                None => forwarded.push((b, o.prob)),
            },
            (walk::Verdict::Drop | walk::Verdict::Reject, _) => refused += o.prob,
            _ => {}
        }
    }
    alternatives.iter().any(|(refuses, backends)| {
        if *refuses {
            return refused >= 1.0 - PROB_TOLERANCE;
        }
        let share = 1.0 / backends.len() as f64;
        forwarded.len() == backends.len()
            && forwarded.iter().all(|(b, p)| backends.iter().any(|x| x == b) && (p - share).abs() <= PROB_TOLERANCE)
    })
}

/// One alternative outcome of a case as Python hands it over: refused, or the backends it is
/// spread over evenly (distinct).
type AlternativeIn = (bool, Vec<String>);

/// A packet as Python hands it over: (IP version, source, destination, protocol, destination
/// port, source port, input interface, output interface, mark).
type PacketIn = (u8, u128, u128, String, u32, u32, Option<String>, Option<String>, u32);

fn packet_of(p: PacketIn) -> Packet {
    let (version, src, dst, proto, dport, sport, iif, oif, mark) = p;
    Packet { version, src, dst, proto, dport, sport, iif, oif, mark }
}

/// `entries`' answer: the outcomes, the undecidable rules that did not matter, the parts read.
type Entries<'py> = (Bound<'py, PyList>, Vec<String>, Option<Bound<'py, PyList>>);

/// A rule of `port_rules`: its index among its table's rules, destination port, protocol,
/// destination range and whether that is negated.
type PortRule = (u32, u128, String, Option<(u8, u128, u128)>, bool);

fn prerouting(hook: &str) -> PyResult<bool> {
    match hook {
        "prerouting" => Ok(true),
        "output" => Ok(false),
        _ => Err(PyValueError::new_err(format!("hook {hook:?}: prerouting or output"))),
    }
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<IptablesRules>()?;
    m.add_class::<SavedRules>()?;
    m.add_class::<RulesState>()?;
    m.add_class::<RuleLines>()?;
    m.add_class::<cluster::NameLines>()?;
    m.add_function(wrap_pyfunction!(save::scan_save, m)?)?;
    m.add_function(wrap_pyfunction!(share::share_values, m)?)?;
    m.add_function(wrap_pyfunction!(share::load_json, m)?)?;
    m.add_function(wrap_pyfunction!(cluster::slice_endpoints, m)?)?;
    m.add_function(wrap_pyfunction!(cluster::slice_address_problems, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("SHORT_CHAINS_KEPT", table::SHORT_CHAINS_KEPT)?;
    Ok(())
}
