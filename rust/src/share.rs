//! Equal values of a parsed document made one object (`share_values`).
//!
//! `json.loads` makes a new object of every value it reads: the 50,000 EndpointSlices of a large
//! cluster hold 250,000 dicts `{"ready": true, "serving": true, "terminating": false}`, as many
//! copies of `"discovery.k8s.io/v1"`, `"TCP"` and each node's name, at about 200 bytes a dict and
//! 50 a string. kpdoctor reads a cluster's objects and never writes to them, so one object can
//! stand for every equal copy: the strings, numbers and the dicts and lists of those (a leaf)
//! seen before are put in place of their copies, which the collector then frees.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Containers deeper than this are left as they are (a document's depth is bounded where it is
/// parsed; this keeps the walk's own recursion bounded whatever it is given).
const MAX_DEPTH: usize = 128;
/// A dict or list of more values than this is never shared (equal copies of large leaves are rare,
/// and their key would cost more than the copy).
const MAX_LEAF: usize = 16;
/// Longer strings are left as they are (an annotation of a whole manifest is seldom repeated, and
/// hashing it would cost more than it saves).
const MAX_TEXT: usize = 256;

/// A hasher seeded per run (the texts and numbers come from evidence: a crafted file must not
/// make every one land in the same bucket): xxh3 for bytes, a multiply for words, a finalizer.
#[derive(Clone, Copy)]
struct Mix {
    seed: u64,
    h: u64,
}

impl Mix {
    fn add(&mut self, x: u64) {
        self.h = (self.h.rotate_left(5) ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

impl Hasher for Mix {
    fn write(&mut self, bytes: &[u8]) {
        self.add(xxh3_64_with_seed(bytes, self.seed));
    }
    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }
    fn write_i64(&mut self, n: i64) {
        self.add(n as u64);
    }
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
    fn finish(&self) -> u64 {
        // splitmix64's finalizer over the seeded state
        let mut z = self.h ^ self.seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[derive(Clone, Copy)]
struct Seeded(u64);

impl Default for Seeded {
    fn default() -> Self {
        Seeded(RandomState::new().hash_one(0x6b70_646f_6374_6f72_u64))
    }
}

impl BuildHasher for Seeded {
    type Hasher = Mix;
    fn build_hasher(&self) -> Mix {
        Mix { seed: self.0, h: self.0 }
    }
}

/// A value's replacement and whether it can be part of a leaf's key (a scalar made canonical:
/// its identity then stands for its value).
type Placed<'py> = (Bound<'py, PyAny>, bool);

/// A key object (held, so that its identity stays its own) and its canonical string.
type KeyText<'py> = (Bound<'py, PyAny>, Option<Bound<'py, PyAny>>);

struct Sharer<'py> {
    seed: u64,
    /// one string per text, by the text's seeded hash (two texts of one hash, which a crafted
    /// file could make, leave the second as it is), with where its text is in the input read
    /// (compared there, without asking Python for it; `u32::MAX`: not there as it reads)
    texts: HashMap<u64, (Bound<'py, PyAny>, u32, u32), Seeded>,
    /// the canonical string of each key object met (`json.loads` makes one object per key text)
    keys: HashMap<usize, KeyText<'py>, Seeded>,
    ints: HashMap<i64, Bound<'py, PyAny>, Seeded>,
    floats: HashMap<u64, Bound<'py, PyAny>, Seeded>,
    /// leaves by their kind (0 dict, 1 list) and the identities of their canonical keys and values
    leaves: HashMap<Vec<usize>, Bound<'py, PyAny>, Seeded>,
    /// the key of each leaf being walked, one after another (a container's part ends where its
    /// child's begins; the child truncates back to it)
    key: Vec<usize>,
    /// with aliases (YAML can put one container in several places): the containers already
    /// walked, by identity, each held (so that its identity is not reused while the walk runs),
    /// with what took its place; each is walked once
    seen: Option<HashMap<usize, (Bound<'py, PyAny>, Placed<'py>), Seeded>>,
    replaced: usize,
}

impl<'py> Sharer<'py> {
    fn new(aliased: bool) -> Self {
        let s = Seeded::default();
        Sharer {
            seed: s.0,
            texts: HashMap::with_hasher(s),
            keys: HashMap::with_hasher(s),
            ints: HashMap::with_hasher(s),
            floats: HashMap::with_hasher(s),
            leaves: HashMap::with_hasher(s),
            key: Vec::new(),
            seen: aliased.then(|| HashMap::with_hasher(s)),
            replaced: 0,
        }
    }

    /// The canonical string of text `t`: the one met before with this text, else `make()`'s,
    /// kept as the canonical one (`at`: where `t` is in `input`). None for a text longer than
    /// MAX_TEXT, or one whose hash another text has.
    fn canonical(&mut self, t: &str, input: &str, at: Option<usize>, make: impl FnOnce() -> Bound<'py, PyAny>) -> Option<Bound<'py, PyAny>> {
        if t.len() > MAX_TEXT {
            return None;
        }
        let h = xxh3_64_with_seed(t.as_bytes(), self.seed);
        if let Some((c, start, len)) = self.texts.get(&h) {
            let met = if *start == u32::MAX {
                c.cast::<PyString>().ok().and_then(|c| c.to_str().ok())
            } else {
                input.get(*start as usize..(*start + *len) as usize)
            };
            return (met == Some(t)).then(|| c.clone());
        }
        let v = make();
        self.texts.insert(h, (v.clone(), at.map_or(u32::MAX, |a| a as u32), t.len() as u32));
        Some(v)
    }

    /// The canonical string of `s`'s text, or None for a long one, one with lone surrogates, or
    /// one whose hash another text has.
    fn text(&mut self, s: &Bound<'py, PyString>) -> Option<Bound<'py, PyAny>> {
        let t = s.to_str().ok()?;
        self.canonical(t, "", None, || s.clone().into_any())
    }

    /// The canonical string of a dict's key (a key object is looked up once).
    fn key_text(&mut self, k: &Bound<'py, PyAny>) -> Option<Bound<'py, PyAny>> {
        let id = k.as_ptr() as usize;
        if let Some((_, c)) = self.keys.get(&id) {
            return c.clone();
        }
        let c = k.cast_exact::<PyString>().ok().and_then(|s| self.text(s));
        self.keys.insert(id, (k.clone(), c.clone()));
        c
    }

    fn value(&mut self, v: &Bound<'py, PyAny>, depth: usize) -> PyResult<Placed<'py>> {
        if let Ok(s) = v.cast_exact::<PyString>() {
            return Ok(match self.text(s) {
                Some(t) => (t, true),
                None => (v.clone(), false),
            });
        }
        if v.is_none() || v.is_exact_instance_of::<PyBool>() {
            return Ok((v.clone(), true));
        }
        if v.is_exact_instance_of::<PyInt>() {
            return Ok(match v.extract::<i64>() {
                Ok(n) => (self.ints.entry(n).or_insert_with(|| v.clone()).clone(), true),
                Err(_) => (v.clone(), false),
            });
        }
        if v.is_exact_instance_of::<PyFloat>() {
            let f = v.extract::<f64>()?;
            if f.is_nan() {
                // NaN is not equal to itself: two are two (one object would compare equal in a container)
                return Ok((v.clone(), false));
            }
            return Ok((self.floats.entry(f.to_bits()).or_insert_with(|| v.clone()).clone(), true));
        }
        if depth >= MAX_DEPTH {
            return Ok((v.clone(), false));
        }
        let id = v.as_ptr() as usize;
        if let Some((_, placed)) = self.seen.as_ref().and_then(|seen| seen.get(&id)) {
            return Ok(placed.clone());
        }
        let placed = if let Ok(d) = v.cast_exact::<PyDict>() {
            self.dict(d, depth)?
        } else if let Ok(l) = v.cast_exact::<PyList>() {
            self.list(l, depth)?
        } else {
            return Ok((v.clone(), false));
        };
        if let Some(seen) = self.seen.as_mut() {
            seen.insert(id, (v.clone(), placed.clone()));
        }
        Ok(placed)
    }

    /// `d` with its values made canonical in place (a value replaced keeps its key's place);
    /// `d` itself, or the equal leaf seen before.
    fn dict(&mut self, d: &Bound<'py, PyDict>, depth: usize) -> PyResult<Placed<'py>> {
        let start = self.key.len();
        self.key.push(0);
        let mut leaf = d.len() <= MAX_LEAF;
        for (k, v) in d.iter() {
            let (placed, scalar) = self.value(&v, depth + 1)?;
            if !placed.is(&v) {
                d.set_item(&k, &placed)?;
                self.replaced += 1;
            }
            if leaf {
                match self.key_text(&k) {
                    Some(kc) if scalar => self.key.extend([kc.as_ptr() as usize, placed.as_ptr() as usize]),
                    _ => leaf = false,
                }
            }
        }
        Ok((self.shared(leaf, start, d.as_any()), false))
    }

    /// `l` with its items made canonical in place; `l` itself, or the equal leaf seen before.
    fn list(&mut self, l: &Bound<'py, PyList>, depth: usize) -> PyResult<Placed<'py>> {
        let start = self.key.len();
        self.key.push(1);
        let mut leaf = l.len() <= MAX_LEAF;
        for i in 0..l.len() {
            let v = l.get_item(i)?;
            let (placed, scalar) = self.value(&v, depth + 1)?;
            if !placed.is(&v) {
                l.set_item(i, &placed)?;
                self.replaced += 1;
            }
            leaf &= scalar;
            if leaf {
                self.key.push(placed.as_ptr() as usize);
            }
        }
        Ok((self.shared(leaf, start, l.as_any()), false))
    }

    fn shared(&mut self, leaf: bool, start: usize, container: &Bound<'py, PyAny>) -> Bound<'py, PyAny> {
        let got = if !leaf {
            container.clone()
        } else if let Some(same) = self.leaves.get(&self.key[start..]) {
            same.clone()
        } else {
            self.leaves.insert(self.key[start..].to_vec(), container.clone());
            container.clone()
        };
        self.key.truncate(start);
        got
    }
}

/// Make equal values in `roots` (a list of parsed documents: dicts and lists of JSON's or YAML's
/// types) one object: strings (up to 256 bytes), integers and floats by value, and dicts and
/// lists holding only those ("leaves", up to 16 values) by content and order. Containers are
/// changed in place (a value replaced by an equal one); `roots` itself and its items stay where
/// they are. Only exact `dict`, `list`, `str`, `int` and `float` are touched. `aliased`: a
/// container may be in several places (YAML's anchors; `json.loads` never does that). The caller
/// promises never to change the documents afterwards: a shared leaf is in several of them.
/// Returns how many values were replaced.
#[pyfunction]
#[pyo3(signature = (roots, aliased=true))]
pub fn share_values(roots: &Bound<'_, PyList>, aliased: bool) -> PyResult<usize> {
    let mut s = Sharer::new(aliased);
    for root in roots.iter() {
        if root.is_exact_instance_of::<PyDict>() || root.is_exact_instance_of::<PyList>() {
            s.value(&root, 0)?;
        }
    }
    Ok(s.replaced)
}

/// Why a read stopped: a text this reader leaves to `json.loads` (which then reads it, or says
/// exactly what is wrong with it), or an error of Python's own.
enum Stop {
    NotMine,
    Py(PyErr),
}

impl From<PyErr> for Stop {
    fn from(e: PyErr) -> Self {
        Stop::Py(e)
    }
}

type Read<T> = Result<T, Stop>;

/// Nesting deeper than this is left to `json.loads` (which stops at Python's recursion limit).
const MAX_NESTING: usize = 512;

/// A JSON text read byte by byte into Python objects, each value made canonical as it is read.
struct Reader<'a, 'py> {
    py: Python<'py>,
    b: &'a [u8],
    text: &'a str,
    i: usize,
    s: Sharer<'py>,
    /// the items of the containers being read, one after another (as `Sharer::key`)
    items: Vec<Bound<'py, PyAny>>,
    /// a string's text with its escapes undone
    scratch: String,
}

impl<'a, 'py> Reader<'a, 'py> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn expect(&mut self, word: &[u8]) -> Read<()> {
        if self.b[self.i..].starts_with(word) {
            self.i += word.len();
            Ok(())
        } else {
            Err(Stop::NotMine)
        }
    }

    fn value(&mut self, depth: usize) -> Read<Placed<'py>> {
        match self.b.get(self.i) {
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') => self.string(),
            Some(b't') => {
                self.expect(b"true")?;
                Ok((PyBool::new(self.py, true).to_owned().into_any(), true))
            }
            Some(b'f') => {
                self.expect(b"false")?;
                Ok((PyBool::new(self.py, false).to_owned().into_any(), true))
            }
            Some(b'n') => {
                self.expect(b"null")?;
                Ok((self.py.None().into_bound(self.py), true))
            }
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(Stop::NotMine), // NaN, Infinity, or not JSON
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while let Some(b'0'..=b'9') = self.b.get(self.i) {
            self.i += 1;
        }
        self.i - start
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?`, as json's scanner matches a number: an
    /// integer, or a float when it has a fraction or an exponent.
    fn number(&mut self) -> Read<Placed<'py>> {
        let start = self.i;
        if self.b[self.i] == b'-' {
            self.i += 1;
        }
        match self.b.get(self.i) {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(Stop::NotMine), // -Infinity, or not a number
        }
        let mut float = false;
        if self.b.get(self.i) == Some(&b'.') && matches!(self.b.get(self.i + 1), Some(b'0'..=b'9')) {
            self.i += 1;
            self.digits();
            float = true;
        }
        if let Some(b'e' | b'E') = self.b.get(self.i) {
            let at = self.i;
            self.i += 1;
            if let Some(b'+' | b'-') = self.b.get(self.i) {
                self.i += 1;
            }
            if self.digits() == 0 {
                self.i = at; // not an exponent: the number ends before it (and the text is not JSON)
            } else {
                float = true;
            }
        }
        let t = &self.text[start..self.i];
        if float {
            let f: f64 = t.parse().map_err(|_| Stop::NotMine)?;
            let v = self.s.floats.entry(f.to_bits()).or_insert_with(|| PyFloat::new(self.py, f).into_any()).clone();
            Ok((v, true))
        } else {
            // beyond 64 bits: Python's int (and its digit limit) reads it
            let n: i64 = t.parse().map_err(|_| Stop::NotMine)?;
            let py = self.py;
            Ok((self.s.ints.entry(n).or_insert_with(|| PyInt::new(py, n).into_any()).clone(), true))
        }
    }

    fn hex4(&mut self) -> Read<u32> {
        let h = self.b.get(self.i..self.i + 4).ok_or(Stop::NotMine)?;
        let mut n = 0u32;
        for &c in h {
            n = n * 16 + (c as char).to_digit(16).ok_or(Stop::NotMine)?;
        }
        self.i += 4;
        Ok(n)
    }

    /// A string (at its opening quote): its canonical object when it is short, a new one else.
    fn string(&mut self) -> Read<Placed<'py>> {
        self.i += 1;
        let start = self.i;
        loop {
            match self.b.get(self.i) {
                Some(b'"') => break,
                Some(b'\\') => return self.escaped(start),
                Some(&c) if c < 0x20 => return Err(Stop::NotMine), // json.loads is strict
                Some(_) => self.i += 1,
                None => return Err(Stop::NotMine),
            }
        }
        let t = &self.text[start..self.i];
        self.i += 1;
        Ok(self.placed_text(t, Some(start)))
    }

    fn escaped(&mut self, start: usize) -> Read<Placed<'py>> {
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        out.push_str(&self.text[start..self.i]);
        let got = self.unescape(&mut out).map(|()| self.placed_text(&out, None));
        self.scratch = out;
        got
    }

    fn unescape(&mut self, out: &mut String) -> Read<()> {
        loop {
            let run = self.i;
            while let Some(&c) = self.b.get(self.i) {
                if c == b'"' || c == b'\\' || c < 0x20 {
                    break;
                }
                self.i += 1;
            }
            out.push_str(&self.text[run..self.i]);
            match self.b.get(self.i) {
                Some(b'"') => {
                    self.i += 1;
                    return Ok(());
                }
                Some(b'\\') => {
                    self.i += 1;
                    let e = *self.b.get(self.i).ok_or(Stop::NotMine)?;
                    self.i += 1;
                    match e {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let hi = self.hex4()?;
                            let c = if (0xd800..0xdc00).contains(&hi) {
                                // a surrogate pair; a lone surrogate (kept by json.loads) has no text here
                                if !self.b[self.i..].starts_with(b"\\u") {
                                    return Err(Stop::NotMine);
                                }
                                self.i += 2;
                                let lo = self.hex4()?;
                                if !(0xdc00..0xe000).contains(&lo) {
                                    return Err(Stop::NotMine);
                                }
                                0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00)
                            } else {
                                hi
                            };
                            out.push(char::from_u32(c).ok_or(Stop::NotMine)?);
                        }
                        _ => return Err(Stop::NotMine),
                    }
                }
                _ => return Err(Stop::NotMine),
            }
        }
    }

    /// The canonical string of `t` (`at`: where it is in the input, when it is there as it
    /// reads), else a new one.
    fn placed_text(&mut self, t: &str, at: Option<usize>) -> Placed<'py> {
        let py = self.py;
        match self.s.canonical(t, self.text, at, || PyString::new(py, t).into_any()) {
            Some(v) => (v, true),
            None => (PyString::new(py, t).into_any(), false),
        }
    }

    /// Enter a container (at its opening bracket): where its leaf key and its items begin.
    fn enter(&mut self, depth: usize, kind: usize) -> Read<(usize, usize)> {
        if depth > MAX_NESTING {
            return Err(Stop::NotMine);
        }
        self.i += 1;
        let start = self.s.key.len();
        self.s.key.push(kind);
        self.ws();
        Ok((start, self.items.len()))
    }

    /// At a container's first item: true (and past it) when the container closes there.
    fn closes(&mut self, close: u8) -> bool {
        let empty = self.b.get(self.i) == Some(&close);
        self.i += usize::from(empty);
        empty
    }

    /// After an item: true at the container's end, false after a comma.
    fn after_item(&mut self, close: u8) -> Read<bool> {
        self.ws();
        match self.b.get(self.i) {
            Some(b',') => {
                self.i += 1;
                self.ws();
                Ok(false)
            }
            Some(&c) if c == close => {
                self.i += 1;
                Ok(true)
            }
            _ => Err(Stop::NotMine),
        }
    }

    fn object(&mut self, depth: usize) -> Read<Placed<'py>> {
        let (start, first) = self.enter(depth, 0)?;
        let mut leaf = true;
        if !self.closes(b'}') {
            loop {
                if self.b.get(self.i) != Some(&b'"') {
                    return Err(Stop::NotMine);
                }
                let (k, k_canonical) = self.string()?;
                self.ws();
                if self.b.get(self.i) != Some(&b':') {
                    return Err(Stop::NotMine);
                }
                self.i += 1;
                self.ws();
                let (v, scalar) = self.value(depth)?;
                leaf &= k_canonical && scalar;
                if leaf {
                    self.s.key.extend([k.as_ptr() as usize, v.as_ptr() as usize]);
                }
                self.items.extend([k, v]);
                if self.after_item(b'}')? {
                    break;
                }
            }
        }
        leaf &= self.items.len() - first <= 2 * MAX_LEAF;
        let py = self.py;
        let items = self.items.split_off(first);
        let made = move || -> PyResult<Bound<'py, PyAny>> {
            let d = PyDict::new(py);
            for kv in items.chunks_exact(2) {
                d.set_item(&kv[0], &kv[1])?; // a repeated key: its first place, its last value (as json.loads)
            }
            Ok(d.into_any())
        };
        Ok((self.made(leaf, start, made)?, false))
    }

    fn array(&mut self, depth: usize) -> Read<Placed<'py>> {
        let (start, first) = self.enter(depth, 1)?;
        let mut leaf = true;
        if !self.closes(b']') {
            loop {
                let (v, scalar) = self.value(depth)?;
                leaf &= scalar;
                if leaf {
                    self.s.key.push(v.as_ptr() as usize);
                }
                self.items.push(v);
                if self.after_item(b']')? {
                    break;
                }
            }
        }
        leaf &= self.items.len() - first <= MAX_LEAF;
        let py = self.py;
        let items = self.items.split_off(first);
        Ok((self.made(leaf, start, || PyList::new(py, items).map(|l| l.into_any()))?, false))
    }

    /// The container a leaf's key names, made only when no equal one was read before.
    fn made(&mut self, leaf: bool, start: usize, make: impl FnOnce() -> PyResult<Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        let got = if !leaf {
            make()?
        } else if let Some(same) = self.s.leaves.get(&self.s.key[start..]) {
            same.clone()
        } else {
            let c = make()?;
            self.s.leaves.insert(self.s.key[start..].to_vec(), c.clone());
            c
        };
        self.s.key.truncate(start);
        Ok(got)
    }
}

/// A JSON text read as `json.loads` reads it, with equal values made one object as they are read
/// (as `share_values` would leave them, without ever making the copies): `(value,)`. None for a
/// text left to `json.loads`: one that is not JSON (json.loads then says why), or that this reader
/// does not read exactly as json.loads does (NaN or Infinity, an integer beyond 64 bits, a lone
/// surrogate escape, nesting deeper than 512, text that is not UTF-8). The caller promises never to
/// change what it gets: a shared leaf is in several places.
#[pyfunction]
pub fn load_json<'py>(py: Python<'py>, text: &Bound<'py, PyString>) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let Ok(t) = text.to_str() else {
        return Ok(None);
    };
    if t.len() >= u32::MAX as usize {
        return Ok(None); // its texts' places would not fit
    }
    let mut r = Reader { py, b: t.as_bytes(), text: t, i: 0, s: Sharer::new(false), items: Vec::new(), scratch: String::new() };
    r.ws();
    let got = r.value(0).and_then(|(v, _)| {
        r.ws();
        if r.i == r.b.len() {
            Ok(v)
        } else {
            Err(Stop::NotMine) // more after the value ("Extra data": json.loads's and the caller's)
        }
    });
    match got {
        Ok(v) => Ok(Some(PyTuple::new(py, [v])?)),
        Err(Stop::NotMine) => Ok(None),
        Err(Stop::Py(e)) => Err(e),
    }
}
