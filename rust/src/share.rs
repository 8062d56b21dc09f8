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
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString};
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
    /// file could make, leave the second as it is)
    texts: HashMap<u64, Bound<'py, PyAny>, Seeded>,
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

    /// The canonical string of `s`'s text, or None for a long one, one with lone surrogates, or
    /// one whose hash another text has.
    fn text(&mut self, s: &Bound<'py, PyString>) -> Option<Bound<'py, PyAny>> {
        let t = s.to_str().ok()?;
        if t.len() > MAX_TEXT {
            return None;
        }
        let h = xxh3_64_with_seed(t.as_bytes(), self.seed);
        match self.texts.get(&h) {
            Some(c) if c.is(s) => Some(c.clone()),
            Some(c) => c.cast::<PyString>().ok()?.to_str().ok().filter(|ct| *ct == t).map(|_| c.clone()),
            None => {
                self.texts.insert(h, s.clone().into_any());
                Some(s.clone().into_any())
            }
        }
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
