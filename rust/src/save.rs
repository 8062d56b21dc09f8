//! Reading a whole `iptables-save` dump as iptables wrote it: the bulk of `parse_save`
//! (`kpdoctor/parse/iptables.py`) for the dumps a node's own `iptables-save` prints. A node with
//! 10,000 Services prints a quarter of a million lines; this pass reads them once, without a
//! Python step per line, and hands back each table's columns for Python to make its `Rule`s of.
//!
//! Only a plain dump is read here: ASCII with no control character but the line feed, no
//! backslash, every line a table, `COMMIT`, a comment, a chain declaration or an `-A` rule
//! (counters allowed) with balanced quotes. Anything else (a paste, a spliced stderr warning, a
//! rule only a shell-word parser splits, `-I`) gives None and the Python parser reads it all:
//! what this pass reads, it reads as that parser's plain-dump path does, diagnostics included.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use pyo3::exceptions::PyIndexError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString, PyTuple};

use crate::table::{RawRule, Source, Table};
use crate::tokens;
use xxhash_rust::xxh3::xxh3_64;

/// One table's rules as the dump holds them: each rule's chain, line and place in the dump,
/// which is kept whole (a rule's text is its slice, made when asked for). A node's 176,000
/// rules as Python objects, each with its text, were 66 MB at 10,000 Services; here they are
/// the dump and 20 bytes a rule.
#[pyclass(frozen, module = "kpdoctor._core")]
pub struct SavedRules {
    dump: Py<PyString>,
    /// the distinct chain names of the rules (interned Python strings)
    chains: Vec<Py<PyString>>,
    chain_of: Vec<u32>,
    lines: Vec<i64>,
    /// byte offsets of each rule's line in the dump (ASCII: the same as character offsets):
    /// where it starts, where its text without counters starts, where it ends
    spans: Vec<(u32, u32, u32)>,
    /// a rule with `[packets:bytes]` before it: its counters (None past 64 bits)
    counters: HashMap<u32, (Option<u64>, Option<u64>)>,
}

/// A rule's counters and its text after them, when it has counters.
type Counted<'py> = Option<(Option<u64>, Option<u64>, Bound<'py, PyString>)>;

impl SavedRules {
    /// How many rules.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// Hand every rule to `t` (a core table), in the dump's order: as its place in the dump, or,
    /// for the rare line only a shell-word parser splits right, as the Python parser's tokens.
    pub fn fill(&self, py: Python<'_>, t: &mut Table) -> PyResult<()> {
        let dump = self.dump.bind(py);
        let text = dump.to_str()?;
        // each of the dump's chains once, as the table numbers it
        let ids = self.chains.iter().map(|c| Ok(t.chain_id(c.bind(py).to_str()?))).collect::<PyResult<Vec<u32>>>()?;
        t.dump = Some(self.dump.clone_ref(py));
        let mut split = None; // the Python parser's splitter, looked up at the first such line
        for ((&c, &line), &(_, b, e)) in self.chain_of.iter().zip(&self.lines).zip(&self.spans) {
            let body = &text[b as usize..e as usize];
            // (a dump read here has no backslash and balanced quotes: only an apostrophe
            // inside a quoted comment needs the shell-word parser)
            let source = if body.contains('\'') && tokens::needs_shell(body) {
                let split = match &split {
                    Some(f) => f,
                    None => split.insert(py.import("kpdoctor.parse.iptables")?.getattr("_split")?),
                };
                let toks: Option<Vec<String>> = split.call1((body.trim_matches(crate::addr::py_space),))?.extract()?;
                Source::Args(toks.unwrap_or_default().into_iter().skip(2).collect())
            } else {
                Source::Span(b, e)
            };
            t.push_to(ids[c as usize], RawRule { line, source });
        }
        Ok(())
    }

    /// The rules whose text holds `needle`, in order, each once.
    fn holding(&self, dump: &str, needle: &str) -> Vec<usize> {
        if needle.is_empty() {
            return (0..self.lines.len()).collect();
        }
        let mut out: Vec<usize> = Vec::new();
        for (at, _) in dump.match_indices(needle) {
            let at = at as u32;
            // the last rule starting at or before the match, if the match lies within it
            let i = self.spans.partition_point(|&(s, _, _)| s <= at);
            if i == 0 {
                continue;
            }
            let (_, _, e) = self.spans[i - 1];
            if at + needle.len() as u32 <= e && out.last() != Some(&(i - 1)) {
                out.push(i - 1);
            }
        }
        out
    }

    /// Rule `i`'s text and, when it has counters, its counters and its text after them.
    fn text<'py>(&self, py: Python<'py>, dump: &str, i: usize) -> (Bound<'py, PyString>, Counted<'py>) {
        let (s, b, e) = self.spans[i];
        let counted = self.counters.get(&(i as u32)).map(|&(p, n)| (p, n, PyString::new(py, &dump[b as usize..e as usize])));
        (PyString::new(py, &dump[s as usize..e as usize]), counted)
    }
}

#[pymethods]
impl SavedRules {
    fn __len__(&self) -> usize {
        self.len()
    }

    /// The rule at `i`: (chain, line, text, counted), `counted` None or (packets, bytes, text
    /// without the counters).
    fn rule<'py>(&self, py: Python<'py>, i: usize) -> PyResult<(Py<PyString>, i64, Bound<'py, PyString>, Counted<'py>)> {
        if i >= self.lines.len() {
            return Err(PyIndexError::new_err("rule index out of range"));
        }
        let (text, counted) = self.text(py, self.dump.bind(py).to_str()?, i);
        Ok((self.chains[self.chain_of[i] as usize].clone_ref(py), self.lines[i], text, counted))
    }

    /// Every rule, as `rule` gives it.
    fn rules<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let dump = self.dump.bind(py).to_str()?;
        PyList::new(
            py,
            (0..self.lines.len()).map(|i| {
                let (text, counted) = self.text(py, dump, i);
                (self.chains[self.chain_of[i] as usize].clone_ref(py), self.lines[i], text, counted)
            }),
        )
    }

    /// The rules whose text holds `needle`, in order, each once.
    ///
    /// With `more`, only those whose line also holds each of those (looked for in the lines the
    /// first found).
    #[pyo3(signature = (needle, *more))]
    fn containing(&self, py: Python<'_>, needle: &str, more: Vec<String>) -> PyResult<Vec<usize>> {
        let dump = self.dump.bind(py).to_str()?;
        let mut out = self.holding(dump, needle);
        if !more.is_empty() {
            out.retain(|&i| {
                let (s, _, e) = self.spans[i];
                let text = &dump[s as usize..e as usize];
                more.iter().all(|m| text.contains(m.as_str()))
            });
        }
        Ok(out)
    }

    /// How many rules are in a `KUBE-*` chain or jump (or go) to one (`Ruleset.kube_rule_count`),
    /// and the rules left to Python: those naming `KUBE-` outside such a chain whose line only a
    /// shell-word parser splits right.
    fn kube_rules(&self, py: Python<'_>) -> PyResult<(usize, Vec<usize>)> {
        let dump = self.dump.bind(py).to_str()?;
        let kube = self.chains.iter().map(|c| c.bind(py).to_str().map(|c| c.starts_with("KUBE-"))).collect::<PyResult<Vec<bool>>>()?;
        let mut count = 0;
        let mut left = Vec::new();
        for (i, (&c, &(_, b, e))) in self.chain_of.iter().zip(&self.spans).enumerate() {
            if kube[c as usize] {
                count += 1;
                continue;
            }
            let body = &dump[b as usize..e as usize];
            if !body.contains("KUBE-") {
                continue;
            }
            match tokens::rule_args(body.trim_matches(crate::addr::py_space)) {
                Some(args) => count += usize::from(tokens::target(&args).is_some_and(|t| t.starts_with("KUBE-"))),
                None => left.push(i),
            }
        }
        Ok((count, left))
    }

    /// The rules whose line holds one of `needles` and whose text without counters another
    /// such rule of the table repeats: per such text, in the order of its first rule, (that
    /// rule's index, how many rules read so). A writer that checks before it appends never
    /// makes two (`facts/duplicates.py`).
    fn repeated(&self, py: Python<'_>, needles: Vec<String>) -> PyResult<Vec<(usize, usize)>> {
        let dump = self.dump.bind(py).to_str()?;
        let body = |i: usize| {
            let (_, b, e) = self.spans[i];
            dump[b as usize..e as usize].trim_matches(crate::addr::py_space)
        };
        // (first rule, copies) by a hash of the text; a text whose hash another text took first
        // is counted by the text itself (rare)
        let mut by_hash: HashMap<u64, (usize, usize)> = HashMap::new();
        let mut by_text: HashMap<&str, (usize, usize)> = HashMap::new();
        for (i, &(s, _, e)) in self.spans.iter().enumerate() {
            if !needles.iter().any(|n| dump[s as usize..e as usize].contains(n.as_str())) {
                continue;
            }
            let text = body(i);
            match by_hash.entry(xxh3_64(text.as_bytes())) {
                Entry::Vacant(v) => {
                    v.insert((i, 1));
                }
                Entry::Occupied(mut o) if body(o.get().0) == text => o.get_mut().1 += 1,
                Entry::Occupied(_) => by_text.entry(text).or_insert((i, 0)).1 += 1,
            }
        }
        let mut out: Vec<(usize, usize)> = by_hash.into_values().chain(by_text.into_values()).filter(|&(_, n)| n > 1).collect();
        out.sort_unstable();
        Ok(out)
    }

    /// The rules of these chains, in order.
    fn in_chains(&self, py: Python<'_>, names: Vec<String>) -> Vec<usize> {
        let wanted: Vec<bool> = self.chains.iter().map(|c| c.bind(py).to_str().is_ok_and(|c| names.iter().any(|n| n == c))).collect();
        self.chain_of.iter().enumerate().filter(|(_, &c)| wanted[c as usize]).map(|(i, _)| i).collect()
    }
}

/// One table's lines as read, in the dump's order.
#[derive(Default)]
struct Columns<'t> {
    /// every chain as the dump makes it known, with its policy (None: a user chain), in order
    /// (a name again where a later line declares it again)
    chain_names: Vec<&'t str>,
    chain_policies: Vec<Option<&'t str>>,
    known: HashSet<&'t str>,
    /// declarations' lines
    decl_names: Vec<&'t str>,
    decl_lines: Vec<i64>,
    /// a built-in chain's declaration with counters other than `[0:0]`: its text and packets
    policy_names: Vec<&'t str>,
    policy_texts: Vec<&'t str>,
    packet_names: Vec<&'t str>,
    packet_values: Vec<u64>,
    rule_chains: Vec<&'t str>,
    rule_lines: Vec<i64>,
    rule_texts: Vec<&'t str>,
    /// per rule with `[packets:bytes]`: its counters (None past 64 bits) and text without them
    counters: Vec<(usize, Option<u64>, Option<u64>, &'t str)>,
}

/// A `[packets:bytes]` counter as `_counter` reads it: None past 20 digits or 64 bits.
fn counter(digits: &str) -> Option<u64> {
    if digits.len() > 20 {
        return None;
    }
    digits.parse().ok()
}

fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// `[packets:bytes]`'s two numbers, if `s` is exactly that.
fn counter_pair(s: &str) -> Option<(&str, &str)> {
    let inner = s.strip_prefix('[')?.strip_suffix(']')?;
    let (p, b) = inner.split_once(':')?;
    (all_digits(p) && all_digits(b)).then_some((p, b))
}

/// The first 80 characters of a line (ASCII here), as diagnostics quote it.
fn head80(s: &str) -> &str {
    &s[..s.len().min(80)]
}

struct Scan<'t> {
    tables: Vec<(&'t str, Columns<'t>)>,
    comments: Vec<(i64, &'t str)>,
    diagnostics: Vec<(i64, String)>,
    open: Option<usize>,
    lines: i64,
}

/// Whether the text is ASCII without a control character but the line feed, and without a
/// backslash (in blocks without an early exit, which the compiler turns into vector code: a
/// node's dump is tens of MB).
fn plain(text: &[u8]) -> bool {
    text.chunks(64).all(|block| {
        block.iter().fold(true, |ok, &b| ok & ((0x20..0x7f).contains(&b) || b == b'\n') & (b != b'\\'))
    })
}

/// The dump read, or None where the Python parser must read it.
fn scan(text: &str, first_line: i64) -> Option<Scan<'_>> {
    if !plain(text.as_bytes()) {
        return None;
    }
    // a warning written into a line (stderr mixed into stdout): the Python parser repairs it
    let bytes = text.as_bytes();
    if text.match_indices('#').any(|(at, _)| at > 0 && bytes[at - 1] != b'\n' && bytes[at..].starts_with(b"# Warning")) {
        return None;
    }
    let mut s = Scan { tables: Vec::new(), comments: Vec::new(), diagnostics: Vec::new(), open: None, lines: 0 };
    let mut by_name: HashMap<&str, usize> = HashMap::new();
    for (i, raw) in text.lines().enumerate() {
        s.lines = i as i64 + 1;
        let ln = first_line + i as i64;
        let line = raw.trim_matches(' ');
        if line.is_empty() {
            continue;
        }
        if line.starts_with('#') {
            s.comments.push((ln, line));
            continue;
        }
        if let Some(name) = line.strip_prefix('*') {
            let name = name.trim_matches(' ');
            let k = *by_name.entry(name).or_insert_with(|| {
                s.tables.push((name, Columns::default()));
                s.tables.len() - 1
            });
            s.open = Some(k);
            continue;
        }
        if line == "COMMIT" {
            s.open = None;
            continue;
        }
        let Some(k) = s.open else {
            s.diagnostics.push((ln, format!("outside any table: {}", head80(line))));
            continue;
        };
        let cols = &mut s.tables[k].1;
        if let Some(decl) = raw.strip_prefix(':') {
            declare(cols, decl, raw, line, ln, &mut s.diagnostics)?;
            continue;
        }
        rule(cols, raw, line, ln, &mut s.diagnostics)?;
    }
    Some(s)
}

/// A chain declaration (`:CHAIN POLICY [packets:bytes]`), as `parse_save` reads it.
fn declare<'t>(cols: &mut Columns<'t>, decl: &'t str, raw: &'t str, line: &'t str, ln: i64, diags: &mut Vec<(i64, String)>) -> Option<()> {
    let parts: Vec<&str> = decl.split(' ').collect();
    let plain = parts.len() == 2 || (parts.len() == 3 && parts[2] == "[0:0]");
    if plain && !parts[0].is_empty() && !parts[1].is_empty() {
        // the plain-dump path: no policy line kept
        cols.chain_names.push(parts[0]);
        cols.chain_policies.push((parts[1] != "-").then_some(parts[1]));
        cols.known.insert(parts[0]);
        cols.decl_names.push(parts[0]);
        cols.decl_lines.push(ln);
        return Some(());
    }
    if raw != line {
        return None;
    }
    // `^:(\S+)\s+(\S+)(?:\s+\[(\d+):(\d+)\])?\s*$` over the line
    let words: Vec<&str> = decl.split(' ').filter(|w| !w.is_empty()).collect();
    let well_formed = !decl.starts_with(' ')
        && (words.len() == 2 || (words.len() == 3 && counter_pair(words[2]).is_some()));
    if !well_formed {
        diags.push((ln, format!("malformed chain line: {}", head80(line))));
        return Some(());
    }
    let (chain, policy) = (words[0], words[1]);
    cols.chain_names.push(chain);
    cols.chain_policies.push((policy != "-").then_some(policy));
    cols.known.insert(chain);
    cols.decl_names.push(chain);
    cols.decl_lines.push(ln);
    if policy != "-" {
        cols.policy_names.push(chain);
        cols.policy_texts.push(line);
        if let Some(n) = words.get(2).and_then(|w| counter_pair(w)).and_then(|(p, _)| counter(p)) {
            cols.packet_names.push(chain);
            cols.packet_values.push(n);
        }
    }
    Some(())
}

/// A rule line (`-A CHAIN ...`, or with `[packets:bytes]` before it), as `parse_save` reads it;
/// None for a line the Python parser must read.
fn rule<'t>(cols: &mut Columns<'t>, raw: &'t str, line: &'t str, ln: i64, diags: &mut Vec<(i64, String)>) -> Option<()> {
    if raw.len() != line.len() || (raw.contains('"') && raw.bytes().filter(|&b| b == b'"').count() % 2 == 1) {
        return None;
    }
    let (body, counted) = match raw.strip_prefix('[') {
        Some(_) => {
            let (pair, rest) = raw.split_once(' ')?;
            let (p, b) = counter_pair(pair)?;
            let rest = rest.trim_start_matches(' ');
            (rest, Some((counter(p), counter(b))))
        }
        None => (raw, None),
    };
    let after = body.strip_prefix("-A ")?;
    let chain = &after[..after.find(' ').unwrap_or(after.len())];
    if chain.is_empty() {
        return None;
    }
    if let Some((packets, bytes)) = counted {
        if packets.is_none() || bytes.is_none() {
            diags.push((ln, "rule counters too large to read: ignored".to_string()));
        }
        cols.counters.push((cols.rule_lines.len(), packets, bytes, body));
    }
    // a chain's rules come together: only a new chain is looked up
    if cols.rule_chains.last() != Some(&chain) && cols.known.insert(chain) {
        diags.push((ln, format!("rule in undeclared chain {chain}")));
        cols.chain_names.push(chain);
        cols.chain_policies.push(None);
    }
    cols.rule_chains.push(chain);
    cols.rule_lines.push(ln);
    cols.rule_texts.push(raw);
    Some(())
}

/// The names as Python strings, one per distinct name.
fn interned_list<'t, 'py>(
    py: Python<'py>,
    interned: &mut HashMap<&'t str, Bound<'py, PyString>>,
    names: &[&'t str],
) -> PyResult<Bound<'py, PyList>> {
    let mut last: Option<(&str, Bound<'py, PyString>)> = None;
    PyList::new(
        py,
        names.iter().map(|&n| match &last {
            Some((name, s)) if *name == n => s.clone(), // a chain's rules come together
            _ => {
                let s = interned.entry(n).or_insert_with(|| PyString::intern(py, n)).clone();
                last = Some((n, s.clone()));
                s
            }
        }),
    )
}

/// A whole `iptables-save` dump's tables, for `parse_save`: None for a text the Python parser
/// reads (see the module's docs). Otherwise `(comments, tables, diagnostics, open table, lines)`:
/// `comments` the `#` lines as `(line, text)`; per table `(name, (chains, their policies),
/// (declared chains, their lines), (built-in chains declared with counters, their lines' text),
/// (those with packets read, the packets), the rules as a `SavedRules`)`; `open` the
/// table left without COMMIT; `lines` how many lines the text has.
#[pyfunction]
#[pyo3(signature = (text, first_line=1))]
pub fn scan_save<'py>(py: Python<'py>, text: &Bound<'py, PyString>, first_line: i64) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let dump = text;
    // text that is not UTF-8 (bytes kept as surrogate escapes) is the Python parser's
    let Ok(text) = text.to_str() else {
        return Ok(None);
    };
    if text.len() >= u32::MAX as usize {
        return Ok(None);
    }
    let Some(s) = scan(text, first_line) else {
        return Ok(None);
    };
    // one string per chain name, shared by its rules (interned, as the Python parser does)
    let mut interned: HashMap<&str, Bound<'py, PyString>> = HashMap::new();
    let tables = PyList::empty(py);
    let base = text.as_ptr() as usize;
    for (table, c) in &s.tables {
        let policies = PyList::new(py, c.chain_policies.iter().map(|p| p.map(|p| PyString::new(py, p))))?;
        let mut ids: HashMap<&str, u32> = HashMap::new();
        let mut chains: Vec<Py<PyString>> = Vec::new();
        // a chain's rules come together: only a new chain's name is looked up
        let mut last: Option<(&str, u32)> = None;
        let chain_of = c
            .rule_chains
            .iter()
            .map(|&name| match last {
                Some((n, id)) if n == name => id,
                _ => {
                    let id = *ids.entry(name).or_insert_with(|| {
                        chains.push(interned.entry(name).or_insert_with(|| PyString::intern(py, name)).clone().unbind());
                        chains.len() as u32 - 1
                    });
                    last = Some((name, id));
                    id
                }
            })
            .collect();
        // offsets fit: a dump of 4 GB or more went to the Python parser above
        let mut spans: Vec<(u32, u32, u32)> = c
            .rule_texts
            .iter()
            .map(|t| {
                let start = (t.as_ptr() as usize - base) as u32;
                (start, start, start + t.len() as u32)
            })
            .collect();
        let mut counters = HashMap::with_capacity(c.counters.len());
        for &(i, packets, bytes, body) in &c.counters {
            spans[i].1 = (body.as_ptr() as usize - base) as u32;
            counters.insert(i as u32, (packets, bytes));
        }
        let saved = SavedRules {
            dump: dump.clone().unbind(),
            chains,
            chain_of,
            lines: c.rule_lines.clone(),
            spans,
            counters,
        };
        let row = (
            PyString::new(py, table),
            (interned_list(py, &mut interned, &c.chain_names)?, policies),
            (interned_list(py, &mut interned, &c.decl_names)?, &c.decl_lines),
            (interned_list(py, &mut interned, &c.policy_names)?, &c.policy_texts),
            (interned_list(py, &mut interned, &c.packet_names)?, &c.packet_values),
            Bound::new(py, saved)?,
        );
        tables.append(row.into_pyobject(py)?)?;
    }
    let open = s.open.map(|k| s.tables[k].0);
    Ok(Some((&s.comments, tables, &s.diagnostics, open, s.lines).into_pyobject(py)?))
}

/// The rules of a dump's tables by their text, to find a rule's line in the next cycle's dump:
/// the agent moves a carried result's citation to its rule's line now, and evaluates it again
/// when that rule is not one line (`dataplane/reuse.py`). Made once per dump: a hash of each
/// rule's text, the texts themselves compared only for the candidates of a hash.
#[pyclass(frozen, module = "kpdoctor._core")]
pub struct RuleLines {
    tables: Vec<Py<SavedRules>>,
    /// (table, rule) of the first rule of each hash; the others of a hash two rules share (the
    /// same text twice, or two texts of one hash)
    first: HashMap<u64, (u32, u32)>,
    more: HashMap<u64, Vec<(u32, u32)>>,
}

impl RuleLines {
    /// The text of rule `i` of table `t`, in `dumps` (each table's dump).
    fn text<'a>(&self, dumps: &[&'a str], (t, i): (u32, u32)) -> &'a str {
        let (s, _, e) = self.tables[t as usize].get().spans[i as usize];
        &dumps[t as usize][s as usize..e as usize]
    }
}

#[pymethods]
impl RuleLines {
    #[new]
    fn new(py: Python<'_>, tables: Vec<Py<SavedRules>>) -> PyResult<Self> {
        let mut first: HashMap<u64, (u32, u32)> = HashMap::new();
        let mut more: HashMap<u64, Vec<(u32, u32)>> = HashMap::new();
        for (t, saved) in tables.iter().enumerate() {
            let saved = saved.get();
            let dump = saved.dump.bind(py).to_str()?;
            first.reserve(saved.spans.len());
            for (i, &(s, _, e)) in saved.spans.iter().enumerate() {
                let h = xxh3_64(&dump.as_bytes()[s as usize..e as usize]);
                let at = (t as u32, i as u32);
                match first.entry(h) {
                    Entry::Occupied(_) => more.entry(h).or_default().push(at),
                    Entry::Vacant(v) => {
                        v.insert(at);
                    }
                }
            }
        }
        Ok(RuleLines { tables, first, more })
    }

    /// The line of the one rule whose text (with its counters, as `SavedRules.rule` gives it) is
    /// `text`; None when no rule reads so, or more than one.
    fn line_of(&self, py: Python<'_>, text: &str) -> PyResult<Option<i64>> {
        let h = xxh3_64(text.as_bytes());
        let Some(&at) = self.first.get(&h) else {
            return Ok(None);
        };
        let dumps = self.tables.iter().map(|t| t.get().dump.bind(py).to_str()).collect::<PyResult<Vec<&str>>>()?;
        let more = self.more.get(&h).map_or(&[][..], Vec::as_slice);
        let mut found = std::iter::once(&at).chain(more).filter(|&&x| self.text(&dumps, x) == text);
        Ok(match (found.next(), found.next()) {
            (Some(&(t, i)), None) => Some(self.tables[t as usize].get().lines[i as usize]),
            _ => None,
        })
    }
}
