//! What a set of iptables rules held, as fingerprints of the parts a walk reads, and which parts
//! differ between two such readings: the node agent carries a result from one cycle to the next
//! when none of the parts its walk read changed (`kpdoctor/dataplane/reuse.py`). Held here, the
//! previous cycle's rules cost a fingerprint per chain (and per index key), not their texts and
//! compiled forms, and the comparison is one pass over two hash maps.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::table::{ChainParts, Table};
use crate::walk::Part;

/// One table's chains, each with its parts' fingerprints.
type TableParts = HashMap<Arc<str>, ChainParts>;

/// The parts of one layer's tables (one dump), by table name.
#[pyclass(frozen, module = "kpdoctor._core")]
pub struct RulesState {
    tables: HashMap<String, TableParts>,
}

impl RulesState {
    pub fn of(py: Python<'_>, tables: &[Table]) -> RulesState {
        let mut out = HashMap::with_capacity(tables.len());
        for t in tables {
            let chains = (0..t.chains.len() as u32).map(|id| (Arc::clone(&t.chains[id as usize].name), t.chain_parts(py, id)));
            // a table named twice (a damaged dump): the walk reads the first, and so does this
            out.entry(t.name.clone()).or_insert_with(|| chains.collect());
        }
        RulesState { tables: out }
    }
}

/// A change as the walk's reads name it: (table, chain or None for the table itself, part).
type Change = (String, Option<Arc<str>>, Part);

/// Every part of a chain (it appeared or went away): the chain itself (the whole part) and,
/// for an indexed chain, what every packet sees and each key's rules.
fn every_part(out: &mut Vec<Change>, table: &str, chain: &Arc<str>, parts: &ChainParts) {
    out.push((table.to_owned(), Some(Arc::clone(chain)), Part::Whole));
    if let ChainParts::Indexed { by_dst, keys, .. } = parts {
        out.push((table.to_owned(), Some(Arc::clone(chain)), Part::Star));
        out.extend(keys.keys().map(|&k| (table.to_owned(), Some(Arc::clone(chain)), Part::Key(*by_dst, k))));
    }
}

/// Every part of a table (it appeared or went away).
fn every_table_part(out: &mut Vec<Change>, table: &str, chains: &TableParts) {
    out.push((table.to_owned(), None, Part::Whole));
    for (chain, parts) in chains {
        every_part(out, table, chain, parts);
    }
}

/// The parts of one chain that differ between two readings.
fn chain_changes(out: &mut Vec<Change>, table: &str, chain: &Arc<str>, was: &ChainParts, now: &ChainParts) {
    let at = |part| (table.to_owned(), Some(Arc::clone(chain)), part);
    match (was, now) {
        (ChainParts::Whole(a), ChainParts::Whole(b)) => {
            if a != b {
                out.push(at(Part::Whole));
            }
        }
        (
            ChainParts::Indexed { by_dst: by_a, star: star_a, keys: keys_a },
            ChainParts::Indexed { by_dst: by_b, star: star_b, keys: keys_b },
        ) => {
            if by_a != by_b || star_a != star_b {
                out.push(at(Part::Star));
            }
            if by_a != by_b {
                out.extend(keys_a.keys().map(|&k| at(Part::Key(*by_a, k))));
                out.extend(keys_b.keys().map(|&k| at(Part::Key(*by_b, k))));
                return;
            }
            for (k, h) in keys_a {
                if keys_b.get(k) != Some(h) {
                    out.push(at(Part::Key(*by_a, *k)));
                }
            }
            out.extend(keys_b.keys().filter(|k| !keys_a.contains_key(k)).map(|&k| at(Part::Key(*by_b, k))));
        }
        // indexed on one side only: every part of both
        _ => {
            every_part(out, table, chain, was);
            every_part(out, table, chain, now);
        }
    }
}

#[pymethods]
impl RulesState {
    /// Which parts differ from `before` (None: nothing was read before, every part is new), as
    /// the walk's reads name them: `(table, chain or None, part)`, part None (the whole chain;
    /// with chain None, the table itself), `"*"` or `("dst" | "dport", key)`. A chain declared
    /// or dropped changes its whole part; a table given or no longer given, every part of it.
    #[pyo3(signature = (before=None))]
    fn changes<'py>(&self, py: Python<'py>, before: Option<PyRef<'py, RulesState>>) -> PyResult<Bound<'py, PyList>> {
        let mut out: Vec<Change> = Vec::new();
        let empty = HashMap::new();
        let old = before.as_ref().map_or(&empty, |b| &b.tables);
        for (table, now) in &self.tables {
            let Some(was) = old.get(table) else {
                every_table_part(&mut out, table, now);
                continue;
            };
            for (chain, parts) in now {
                match was.get(chain) {
                    None => every_part(&mut out, table, chain, parts),
                    Some(w) => chain_changes(&mut out, table, chain, w, parts),
                }
            }
            for (chain, parts) in was {
                if !now.contains_key(chain) {
                    every_part(&mut out, table, chain, parts);
                }
            }
        }
        for (table, was) in old {
            if !self.tables.contains_key(table) {
                every_table_part(&mut out, table, was);
            }
        }
        let mut seen: HashSet<&Change> = HashSet::with_capacity(out.len());
        let list = PyList::empty(py);
        for c in &out {
            if seen.insert(c) {
                let (table, chain, part) = c;
                list.append((table.as_str(), chain.as_deref(), crate::part_object(py, part)?))?;
            }
        }
        Ok(list)
    }

    /// How many parts are held (every chain's, and every indexed chain's keys).
    fn __len__(&self) -> usize {
        self.tables
            .values()
            .flat_map(|t| t.values())
            .map(|p| match p {
                ChainParts::Whole(_) => 1,
                ChainParts::Indexed { keys, .. } => 1 + keys.len(),
            })
            .sum()
    }
}
