//! One iptables table's chains: rules stored once as text, compiled the first time a packet
//! enters their chain, and long chains indexed by exact destination address (or port) so a
//! lookup in KUBE-SERVICES does not walk 10,000 rules (`CompiledTable` and `ChainIndex` in
//! `iptables/compile.py`).
//!
//! A long chain's compiled form is kept for the table's life; a short one's (a Service's or an
//! endpoint's chain: nine rules in ten at 10,000 Services) only among the last few thousand
//! compiled. A verification walks a Service's cases one after the other, so the short chains
//! a walk enters are almost always those it just compiled, and keeping every one of them was
//! most of the core's memory (36 of 40 MB at 10,000 Services).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use pyo3::prelude::*;
use pyo3::types::PyString;
use xxhash_rust::xxh3::Xxh3;

use crate::compile::{compile_named, known_name, CompiledRule, Name};
use crate::tokens::rule_args;

/// Chains longer than this get a destination index, and their compiled form is kept.
pub const INDEX_THRESHOLD: usize = 24;

/// How many short chains' compiled forms a table keeps (the most recently compiled).
pub const SHORT_CHAINS_KEPT: usize = 4096;

/// A rule as read: its line in the user's file and its text: the Python parser's own string
/// (not copied: read when the rule is compiled), or, for a line only a shell-word parser splits
/// right, the tokens the Python parser gave.
pub struct RawRule {
    pub line: i64,
    pub source: Source,
}

pub enum Source {
    Text(Py<PyString>),
    /// the rule's place in its table's dump (a `SavedRules`' rule)
    Span(u32, u32),
    Args(Box<[String]>),
}

impl RawRule {
    /// `f` of the rule's text (None for a rule read as tokens, or text that is not UTF-8).
    fn with_text<R>(&self, py: Python<'_>, dump: Option<&Py<PyString>>, f: impl FnOnce(Option<&str>) -> R) -> R {
        match &self.source {
            Source::Text(text) => f(text.bind(py).to_str().ok()),
            Source::Span(s, e) => {
                let dump = dump.map(|d| d.bind(py));
                f(dump.and_then(|d| d.to_str().ok()).and_then(|d| d.get(*s as usize..*e as usize)))
            }
            Source::Args(_) => f(None),
        }
    }
}

pub struct ChainIndex {
    pub by_dst: bool,
    buckets: HashMap<u128, Vec<u32>>,
    rest: Vec<u32>,
}

impl ChainIndex {
    fn build(rules: &[(u32, CompiledRule)]) -> Option<ChainIndex> {
        let by_dst_n = rules.iter().filter(|(_, r)| r.exact_dst().is_some()).count();
        let by_port_n = rules.iter().filter(|(_, r)| r.exact_dport().is_some()).count();
        let by_dst = by_dst_n >= by_port_n;
        if by_dst_n.max(by_port_n) < rules.len() / 2 {
            return None;
        }
        let mut buckets: HashMap<u128, Vec<u32>> = HashMap::new();
        let mut rest = Vec::new();
        for (i, (_, r)) in rules.iter().enumerate() {
            let key = if by_dst { r.exact_dst() } else { r.exact_dport() };
            match key {
                Some(k) => buckets.entry(k).or_default().push(i as u32),
                None => rest.push(i as u32),
            }
        }
        Some(ChainIndex { by_dst, buckets, rest })
    }

    /// The positions a packet with this key can match, in the chain's order.
    pub fn positions(&self, key: u128) -> Vec<u32> {
        let hit = match self.buckets.get(&key) {
            Some(h) if !h.is_empty() => h,
            _ => return self.rest.clone(),
        };
        if self.rest.is_empty() {
            return hit.clone();
        }
        let mut out = Vec::with_capacity(hit.len() + self.rest.len());
        let (mut a, mut b) = (0, 0);
        while a < hit.len() || b < self.rest.len() {
            if b == self.rest.len() || (a < hit.len() && hit[a] < self.rest[b]) {
                out.push(hit[a]);
                a += 1;
            } else {
                out.push(self.rest[b]);
                b += 1;
            }
        }
        out
    }
}

/// What each walk through a chain can see, as 128-bit fingerprints (`CompiledTable.chain_state`
/// in `iptables/compile.py`): the whole chain (its policy and its rules' texts, in order), or,
/// for an indexed chain, what every packet sees (the index's kind, the policy, the rules outside
/// the index) and, per key, the rules the index gives a packet with it, each with how many of
/// the others come before it. A walk records the same parts it reads (`walk::Part`), so equal
/// fingerprints mean the same walk (the agent carries a result over on that).
pub enum ChainParts {
    Whole(u128),
    Indexed { by_dst: bool, star: u128, keys: HashMap<u128, u128> },
}

/// A built-in chain's policy (None for a user chain) into a fingerprint.
fn hash_policy(h: &mut Xxh3, policy: Option<&str>) {
    match policy {
        Some(p) => {
            h.update(b"P");
            h.update(p.as_bytes());
        }
        None => h.update(b"-"),
    }
    h.update(b"\n");
}

/// A chain's rules compiled (each with its index among the table's rules) and its index.
pub struct CompiledChain {
    pub rules: Vec<(u32, CompiledRule)>,
    pub index: Option<ChainIndex>,
}

pub struct Chain {
    /// shared with the table's index by name: a node's 60,000 chain names stored once
    pub name: Arc<str>,
    /// positions of the chain's rules among the table's
    members: Vec<u32>,
    /// a long chain's compiled form (a chain no packet entered, the other backend's, a CNI's,
    /// costs a pointer); a short chain's is in the table's `recent`
    compiled: OnceLock<Arc<CompiledChain>>,
}

/// The short chains compiled last, oldest first out.
#[derive(Default)]
struct Recent {
    chains: HashMap<u32, Arc<CompiledChain>>,
    order: VecDeque<u32>,
}

pub struct Table {
    pub name: String,
    pub policies: HashMap<String, String>,
    pub chains: Vec<Chain>,
    by_name: HashMap<Arc<str>, u32>,
    pub rules: Vec<RawRule>,
    /// the dump a `Source::Span` rule is a part of
    pub dump: Option<Py<PyString>>,
    /// the chain of the last rule pushed
    last_chain: Option<u32>,
    recent: Mutex<Recent>,
}

impl Table {
    /// `declared`: every chain and its policy (None for a user chain), in the dump's order;
    /// `rules`: the number of rules to come (:meth:`push`).
    pub fn new(name: String, declared: Vec<(String, Option<String>)>, rules: usize) -> Table {
        let mut t = Table {
            name,
            policies: HashMap::new(),
            chains: Vec::with_capacity(declared.len()),
            by_name: HashMap::with_capacity(declared.len()),
            rules: Vec::with_capacity(rules),
            dump: None,
            last_chain: None,
            recent: Mutex::new(Recent::default()),
        };
        for (chain, policy) in declared {
            t.chain_id(&chain);
            if let Some(p) = policy.filter(|p| !p.is_empty()) {
                t.policies.insert(chain, p);
            }
        }
        t
    }

    /// The next rule of the dump, in `chain`.
    pub fn push(&mut self, chain: &str, rule: RawRule) {
        // a chain's rules come together in a dump: only a new chain's name is looked up
        let id = match self.rules.last().zip(self.last_chain) {
            Some((_, last)) if *self.chains[last as usize].name == *chain => last,
            _ => self.chain_id(chain),
        };
        self.push_to(id, rule);
    }

    /// The next rule of the dump, in the chain numbered `id` (`chain`).
    pub fn push_to(&mut self, id: u32, rule: RawRule) {
        self.last_chain = Some(id);
        self.chains[id as usize].members.push(self.rules.len() as u32);
        self.rules.push(rule);
    }

    /// The number of the chain named so (made known if it was not).
    pub fn chain_id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.by_name.get(name) {
            return id;
        }
        let id = self.chains.len() as u32;
        let name: Arc<str> = Arc::from(name);
        self.chains.push(Chain { name: Arc::clone(&name), members: Vec::new(), compiled: OnceLock::new() });
        self.by_name.insert(name, id);
        id
    }

    pub fn find(&self, name: &str) -> Option<u32> {
        self.by_name.get(name).copied()
    }

    /// A chain's compiled rules and index: a long chain's compiled once, a short chain's again
    /// when it has left the recently compiled.
    pub fn compiled(&self, py: Python<'_>, id: u32) -> Arc<CompiledChain> {
        let chain = &self.chains[id as usize];
        if chain.members.len() > INDEX_THRESHOLD {
            return Arc::clone(chain.compiled.get_or_init(|| Arc::new(self.compile(py, chain))));
        }
        // a poisoned lock holds a consistent map (nothing panics between its two updates)
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = recent.chains.get(&id) {
            return Arc::clone(c);
        }
        let c = Arc::new(self.compile(py, chain));
        if recent.order.len() >= SHORT_CHAINS_KEPT {
            if let Some(old) = recent.order.pop_front() {
                recent.chains.remove(&old);
            }
        }
        recent.order.push_back(id);
        recent.chains.insert(id, Arc::clone(&c));
        c
    }

    /// Whether rule `i`'s line names a destination port (`--dport`, `--dports`).
    pub fn names_dport(&self, py: Python<'_>, i: u32) -> bool {
        let rule = &self.rules[i as usize];
        match &rule.source {
            Source::Args(args) => args.iter().any(|a| a.contains("-dport")),
            _ => rule.with_text(py, self.dump.as_ref(), |t| t.is_some_and(|t| t.contains("-dport"))),
        }
    }

    fn compile_rule(&self, py: Python<'_>, i: u32, names: &dyn Fn(&str) -> Name) -> CompiledRule {
        let rule = &self.rules[i as usize];
        match &rule.source {
            Source::Args(args) => compile_named(args, names),
            _ => rule.with_text(py, self.dump.as_ref(), |t| {
                let toks = t.and_then(|t| rule_args(t.trim_matches(crate::addr::py_space)));
                compile_named(&toks.unwrap_or_default(), names)
            }),
        }
    }

    /// Rule `i` compiled on its own (its chain's compiled form is neither made nor kept).
    pub fn compile_one(&self, py: Python<'_>, i: u32) -> CompiledRule {
        self.compile_rule(py, i, &|name: &str| self.name_of(name))
    }

    /// A chain name as compiled rules hold it: the table's own, shared, or a known target's.
    fn name_of(&self, name: &str) -> Name {
        self.by_name.get_key_value(name).map_or_else(|| known_name(name), |(k, _)| Arc::clone(k))
    }

    fn compile(&self, py: Python<'_>, chain: &Chain) -> CompiledChain {
        let names = |name: &str| self.name_of(name);
        let rules: Vec<(u32, CompiledRule)> = chain.members.iter().map(|&i| (i, self.compile_rule(py, i, &names))).collect();
        let index = if rules.len() > INDEX_THRESHOLD { ChainIndex::build(&rules) } else { None };
        CompiledChain { rules, index }
    }

    /// A rule's text (without counters) into a fingerprint; a rule read as tokens, its tokens.
    fn hash_rule(&self, py: Python<'_>, i: u32, h: &mut Xxh3) {
        let rule = &self.rules[i as usize];
        match &rule.source {
            Source::Args(args) => {
                h.update(b"\x01");
                for a in args.iter() {
                    h.update(a.as_bytes());
                    h.update(b"\x00");
                }
            }
            _ => rule.with_text(py, self.dump.as_ref(), |t| {
                h.update(b"\x02");
                h.update(t.unwrap_or("").as_bytes());
            }),
        }
        h.update(b"\n");
    }

    /// What each walk through chain `id` can see (`ChainParts`): a long chain is compiled for
    /// its index (it is kept compiled anyway), a short one only read.
    pub fn chain_parts(&self, py: Python<'_>, id: u32) -> ChainParts {
        let chain = &self.chains[id as usize];
        let policy = self.policies.get(&*chain.name).map(String::as_str);
        if chain.members.len() > INDEX_THRESHOLD {
            let compiled = self.compiled(py, id);
            if let Some(idx) = &compiled.index {
                let mut star = Xxh3::new();
                star.update(if idx.by_dst { b"dst\n" } else { b"dport\n" });
                hash_policy(&mut star, policy);
                for &p in &idx.rest {
                    self.hash_rule(py, chain.members[p as usize], &mut star);
                }
                let keys = idx
                    .buckets
                    .iter()
                    .map(|(&key, positions)| {
                        let mut h = Xxh3::new();
                        for &p in positions {
                            let before = idx.rest.partition_point(|&r| r < p) as u64;
                            h.update(&before.to_le_bytes());
                            self.hash_rule(py, chain.members[p as usize], &mut h);
                        }
                        (key, h.digest128())
                    })
                    .collect();
                return ChainParts::Indexed { by_dst: idx.by_dst, star: star.digest128(), keys };
            }
        }
        let mut h = Xxh3::new();
        hash_policy(&mut h, policy);
        for &i in &chain.members {
            self.hash_rule(py, i, &mut h);
        }
        ChainParts::Whole(h.digest128())
    }

    /// The positions of a chain's rules among the table's.
    pub fn chain_members(&self, id: u32) -> &[u32] {
        &self.chains[id as usize].members
    }

    pub fn size(&self) -> usize {
        self.rules.len()
    }
}
