//! The bulk of a cluster's objects, read where Python spends most of its time on them: the line
//! of each object's name in a JSON listing (`NameLines`), and an EndpointSlice's endpoints
//! (`slice_endpoints`: 50,000 of them at 10,000 Services, read twice, once to find what the API
//! server would have refused and once for what kube-proxy takes). Each mirrors a Python
//! function of `kpdoctor/parse/k8s.py` or `dataplane/expected.py`, which stays the reader without
//! the core; the two must agree on every input (tests/test_cluster_core.py).

use std::collections::HashMap;
use std::net::Ipv4Addr;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};

use crate::addr::py_space;

/// Where the `"name": "..."` fields of a JSON text are, by the text between their quotes, with
/// their lines, handed out in document order: `_NameLines` of `parse/k8s.py` for a JSON text
/// (its regular expression `"name"\s*:\s*"((?:[^"\\]|\\.)*)"`, found left to right without
/// overlap).
#[pyclass(module = "kpdoctor._core")]
pub struct NameLines {
    /// per name, (byte offset, line) of each occurrence, in order
    by_name: HashMap<String, Vec<(usize, u32)>>,
    /// where the next name is looked for from (the byte after the last one handed out)
    pos: usize,
}

/// The end of a run of Python whitespace (`\s*`) in `text` from byte `i`.
fn spaces(text: &str, mut i: usize) -> usize {
    for c in text[i..].chars() {
        if !py_space(c) {
            break;
        }
        i += c.len_utf8();
    }
    i
}

/// The end of the quoted text opening at byte `i` (after its `"`), as the expression reads it:
/// any character but `"` and `\`, or `\` and any character but a line break. None: no match here.
fn quoted_end(text: &str, mut i: usize) -> Option<usize> {
    let b = text.as_bytes();
    while i < b.len() {
        match b[i] {
            b'"' => return Some(i),
            b'\\' => {
                let c = text[i + 1..].chars().next()?;
                if c == '\n' {
                    return None;
                }
                i += 1 + c.len_utf8();
            }
            _ => i += 1,
        }
    }
    None
}

/// The name field opening at byte `start` (at its `"name"`): the span of its text, or None.
fn name_field(text: &str, start: usize) -> Option<(usize, usize)> {
    let b = text.as_bytes();
    let mut i = spaces(text, start + 6);
    if b.get(i) != Some(&b':') {
        return None;
    }
    i = spaces(text, i + 1);
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let end = quoted_end(text, i + 1)?;
    Some((i + 1, end))
}

#[pymethods]
impl NameLines {
    #[new]
    fn new(text: &str) -> Self {
        let b = text.as_bytes();
        let mut by_name: HashMap<String, Vec<(usize, u32)>> = HashMap::new();
        let (mut i, mut line, mut counted) = (0usize, 1u32, 0usize);
        while let Some(k) = text[i..].find("\"name\"") {
            let start = i + k;
            match name_field(text, start) {
                Some((from, to)) => {
                    line = line.saturating_add(b[counted..start].iter().filter(|&&c| c == b'\n').count() as u32);
                    counted = start;
                    by_name.entry(text[from..to].to_owned()).or_default().push((start, line));
                    i = to + 1;
                }
                None => i = start + 1,
            }
        }
        NameLines { by_name, pos: 0 }
    }

    /// The line of the first field naming `name` after the last one handed out, or None (and
    /// then the next look starts where this one did).
    fn next(&mut self, name: &str) -> Option<u32> {
        let at = self.by_name.get(name)?;
        let k = at.partition_point(|&(off, _)| off < self.pos);
        let &(off, line) = at.get(k)?;
        self.pos = off + 1;
        Some(line)
    }
}

/// `is_ip(v, family)` of `parse/k8s.py` for a string: the common case (a dotted IPv4 address,
/// which Rust's parser and `inet_pton` read alike: four decimal parts of 0-255, no leading
/// zero) decided here, anything else asked of `is_ip` itself.
fn is_ip(v: &Bound<'_, PyAny>, family: u8, fallback: &Bound<'_, PyAny>) -> PyResult<bool> {
    if let Ok(s) = v.cast::<PyString>() {
        if let Ok(t) = s.to_str() {
            if !t.is_empty() && t.len() <= 15 && t.bytes().all(|c| c.is_ascii_digit() || c == b'.') && t.parse::<Ipv4Addr>().is_ok() {
                return Ok(family == 4);
            }
        }
    }
    fallback.call1((v, family))?.is_truthy()
}

/// `_bool(v, default)` of `dataplane/expected.py`: the default for an absent or null value, else
/// its truth.
fn truth(v: Option<Bound<'_, PyAny>>, default: bool) -> PyResult<bool> {
    match v {
        Some(v) if !v.is_none() => v.is_truthy(),
        _ => Ok(default),
    }
}

/// A value when it is a dict (`as_dict`), else None (read as empty).
fn dict_of<'py>(v: Option<Bound<'py, PyAny>>) -> Option<Bound<'py, PyDict>> {
    v.and_then(|v| v.cast_into::<PyDict>().ok())
}

/// A non-empty string value, or None (`_text`, and the `nodeName` test).
fn text_of<'py>(v: Option<Bound<'py, PyAny>>) -> Option<Bound<'py, PyAny>> {
    v.filter(|v| v.cast::<PyString>().is_ok() && v.is_truthy().unwrap_or(false))
}

/// One EndpointSlice's `endpoints` as kube-proxy takes them for addresses of `family` (the loop
/// of `_endpoints_from_slices` in `dataplane/expected.py`, without building an `Endpoint`): per
/// endpoint whose first address is one of `family`, `(address, node, ready, serving,
/// terminating, zones)`; and the positions of the others (no address list, an empty one, or a
/// first address that is none of `family`), which the caller names. `is_ip`: `parse.k8s.is_ip`.
#[pyfunction]
pub fn slice_endpoints<'py>(py: Python<'py>, endpoints: &Bound<'py, PyAny>, family: u8, is_ip_fn: &Bound<'py, PyAny>) -> PyResult<(Bound<'py, PyList>, Vec<usize>)> {
    let rows = PyList::empty(py);
    let mut bad = Vec::new();
    let Ok(list) = endpoints.cast::<PyList>() else {
        return Ok((rows, bad));
    };
    for (n, ep) in list.iter().enumerate() {
        let Ok(ep) = ep.cast::<PyDict>() else {
            bad.push(n);
            continue;
        };
        let first = match ep.get_item("addresses")? {
            Some(a) => match a.cast::<PyList>() {
                Ok(a) if !a.is_empty() => Some(a.get_item(0)?),
                _ => None,
            },
            None => None,
        };
        let first = match first {
            Some(f) if is_ip(&f, family, is_ip_fn)? => f,
            _ => {
                bad.push(n);
                continue;
            }
        };
        let (ready, serving, terminating) = match dict_of(ep.get_item("conditions")?) {
            Some(c) => {
                let ready = truth(c.get_item("ready")?, true)?;
                (ready, truth(c.get_item("serving")?, ready)?, truth(c.get_item("terminating")?, false)?)
            }
            None => (true, true, false),
        };
        let node = match text_of(ep.get_item("nodeName")?) {
            Some(n) => Some(n),
            None => dict_of(ep.get_item("topology")?).map(|t| t.get_item("kubernetes.io/hostname")).transpose()?.and_then(text_of),
        };
        let zones = match dict_of(ep.get_item("hints")?).map(|h| h.get_item("forZones")).transpose()?.flatten() {
            Some(z) => Some(zone_names(py, &z)?),
            None => None,
        };
        let none = || py.None().into_bound(py);
        let (node, zones) = (node.unwrap_or_else(none), zones.unwrap_or_else(none));
        let row = PyTuple::new(py, [first, node, ready.into_pyobject(py)?.to_owned().into_any(), serving.into_pyobject(py)?.to_owned().into_any(), terminating.into_pyobject(py)?.to_owned().into_any(), zones])?;
        rows.append(row)?;
    }
    Ok((rows, bad))
}

/// `tuple(str(as_dict(z).get("name", "")) for z in as_list(forZones))`.
fn zone_names<'py>(py: Python<'py>, zones: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let mut out = Vec::new();
    if let Ok(list) = zones.cast::<PyList>() {
        for z in list.iter() {
            let name = match dict_of(Some(z)).map(|d| d.get_item("name")).transpose()?.flatten() {
                Some(v) => v.str()?.into_any(),
                None => PyString::new(py, "").into_any(),
            };
            out.push(name);
        }
    }
    Ok(PyTuple::new(py, out)?.into_any())
}

/// What `_slice_problems` of `parse/k8s.py` finds wrong with an EndpointSlice's `endpoints`, as
/// positions: `(n, -1)` for endpoint `n` whose addresses are no list or an empty one (an
/// endpoint that is no dict stands for its own addresses), `(n, k)` for its address `k` that is
/// not one of `family` (checked only when the slice's family is known). `is_ip`:
/// `parse.k8s.is_ip`.
#[pyfunction]
#[pyo3(signature = (endpoints, family, is_ip_fn))]
pub fn slice_address_problems(endpoints: &Bound<'_, PyAny>, family: Option<u8>, is_ip_fn: &Bound<'_, PyAny>) -> PyResult<Vec<(usize, i64)>> {
    let mut bad = Vec::new();
    let Ok(list) = endpoints.cast::<PyList>() else {
        return Ok(bad);
    };
    for (n, ep) in list.iter().enumerate() {
        let addrs = match ep.cast::<PyDict>() {
            Ok(d) => d.get_item("addresses")?,
            Err(_) => Some(ep),
        };
        let addrs = match addrs.as_ref().map(|a| a.cast::<PyList>()) {
            Some(Ok(a)) if !a.is_empty() => a.clone(),
            _ => {
                bad.push((n, -1));
                continue;
            }
        };
        if let Some(family) = family {
            for (k, a) in addrs.iter().enumerate() {
                if !is_ip(&a, family, is_ip_fn)? {
                    bad.push((n, k as i64));
                }
            }
        }
    }
    Ok(bad)
}
