//! mqtool's native core: the CommitLog record walk of `mqtool.scan.batches._fast_batch`, compiled.
//!
//! The Python scanner stays the reference: this module decides nothing it does not. For a byte
//! range of one CommitLog file it returns the leading run of records the broker accepts, as
//! columns (numpy arrays, no Python object per record); the record where the run stops goes to
//! the interpreted decoder, exactly as on the numpy path.
//!
//! The bytes are hostile: every read goes through `slice::get` and checked arithmetic, so a
//! damaged length ends the run instead of reading outside the buffer; every entry point runs
//! under `catch_unwind` so that a bug surfaces as a `ValueError`, never as a dead interpreter.

use std::panic::{catch_unwind, AssertUnwindSafe};

use numpy::{IntoPyArray, PyArray1};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

mod hashcode;
mod index;
mod props;
mod walk;

use walk::{Columns, Extras, Layout, RunParams};

/// The bytes behind a Python buffer (mmap, bytes, bytearray, memoryview), held while in use.
struct Bytes {
    _buffer: PyBuffer<u8>,
    ptr: usize,
    len: usize,
}

impl Bytes {
    fn get(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        let buffer = PyBuffer::<u8>::get(obj)?;
        if !buffer.is_c_contiguous() {
            return Err(PyBufferError::new_err("the buffer is not contiguous"));
        }
        let ptr = buffer.buf_ptr() as usize;
        let len = buffer.len_bytes();
        Ok(Bytes { _buffer: buffer, ptr, len })
    }

    /// The buffer's bytes. Another process (a running broker) may change the mapped pages while
    /// they are read; every rule below reads each value once and checks it before use, so
    /// such a change gives a wrong answer at worst, never a read outside the mapping.
    fn slice(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: the exporter keeps ptr..ptr+len valid while `_buffer` is held (an mmap
        // refuses to close while exported), and nothing here writes through it.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

thread_local! {
    /// Where the last panic on this thread happened (the hook below records it).
    static LAST_PANIC: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Panics print nothing (mqtool's errors are one line on stderr): the hook keeps the message
/// and its place for the ValueError that `guarded` raises.
fn quiet_panics() {
    std::panic::set_hook(Box::new(|info| {
        let place = info.location().map(|l| format!(" at {}:{}", l.file(), l.line()));
        let text = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown cause".to_string());
        LAST_PANIC.with(|last| *last.borrow_mut() = format!("{text}{}", place.unwrap_or_default()));
    }));
}

/// Runs `f` so that a panic becomes a ValueError.
fn guarded<T>(what: &str, f: impl FnOnce() -> T) -> PyResult<T> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|_| {
        let detail = LAST_PANIC.with(|last| last.borrow().clone());
        PyValueError::new_err(format!("native {what} failed: {detail}"))
    })
}

fn column<'py, T: numpy::Element>(py: Python<'py>, v: Vec<T>) -> Bound<'py, PyArray1<T>> {
    v.into_pyarray(py)
}

/// The run of records from file position `pos` that the scanner's decode_message accepts
/// (`_fast_batch`'s contract), or None when the record at `pos` is not one.
///
/// Returns (columns, topic_index, topics): `columns` is a tuple of arrays in the order of
/// `mqtool.scan.batches._COLUMNS` without `topic_id` (int64, the two CRC flags int8),
/// `topic_index` (int32) indexes `topics`, the distinct topic names' raw bytes of the run.
///
/// With `patterns` (property names + 0x01) the same pass parses each record's properties, and
/// a fourth item follows: ([(starts, ends) int64 per pattern], hashes uint32, exact bool) -
/// the value spans as positions in `buf` (-1 where absent, `codec.property_values`' rule) and
/// String.hashCode of pattern `hash`'s value (`java_hashes`' contract; exact False where the
/// value is absent); with `keys` = (UNIQ_KEY's pattern, KEYS' pattern, separator) a fourth item
/// of those: (owner int64, starts, ends, hashes uint32, exact bool) of the keys buildIndex puts
/// (`index_key_spans`' order), hashed as `topic#key` (exact False where the topic or the key
/// is not well-formed 1- to 3-byte UTF-8). `threads` > 1 decodes the run's records in that many pieces at once, of
/// `min_piece` records at least (tests make it small).
#[pyfunction]
#[pyo3(signature = (buf, pos, stop, limit, base, check_crc, dledger, max_records, max_bytes,
                    patterns=None, hash=None, threads=1, min_piece=4096, keys=None))]
#[allow(clippy::too_many_arguments)]
fn scan_run<'py>(
    py: Python<'py>,
    buf: &Bound<'py, PyAny>,
    pos: i64,
    stop: i64,
    limit: i64,
    base: i64,
    check_crc: bool,
    dledger: bool,
    max_records: i64,
    max_bytes: i64,
    patterns: Option<Vec<Vec<u8>>>,
    hash: Option<usize>,
    threads: usize,
    min_piece: usize,
    keys: Option<(usize, usize, u8)>,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let bytes = Bytes::get(buf)?;
    let params = RunParams {
        pos,
        stop,
        limit,
        base,
        check_crc,
        layout: if dledger { Layout::DLedger } else { Layout::Plain },
        max_records,
        max_bytes,
    };
    let extras = patterns.as_deref().map(|patterns| Extras { patterns, hash, keys });
    let run: Option<Columns> = {
        let data = bytes.slice();
        py.detach(|| guarded("record walk", || walk::run(data, &params, extras.as_ref(), threads, min_piece)))?
    };
    let Some(mut cols) = run else { return Ok(None) };
    let fused = cols.fused.take();
    let topics = PyList::empty(py);
    {
        let data = bytes.slice();
        for &(start, len) in &cols.topics {
            let raw = data.get(start..start + len).unwrap_or(&[]);
            topics.append(PyBytes::new(py, raw))?;
        }
    }
    let arrays: Vec<Bound<'py, PyAny>> = vec![
        column(py, cols.position).into_any(),
        column(py, cols.total_size).into_any(),
        column(py, cols.magic_code).into_any(),
        column(py, cols.body_crc).into_any(),
        column(py, cols.queue_id).into_any(),
        column(py, cols.flag).into_any(),
        column(py, cols.queue_offset).into_any(),
        column(py, cols.physical_offset).into_any(),
        column(py, cols.sys_flag).into_any(),
        column(py, cols.born_timestamp).into_any(),
        column(py, cols.store_timestamp).into_any(),
        column(py, cols.reconsume_times).into_any(),
        column(py, cols.prepared_transaction_offset).into_any(),
        column(py, cols.body_length).into_any(),
        column(py, cols.body_position).into_any(),
        column(py, cols.properties_position).into_any(),
        column(py, cols.properties_length).into_any(),
        column(py, cols.body_crc_ok).into_any(),
        column(py, cols.prop_crc_ok).into_any(),
    ];
    let columns = PyTuple::new(py, arrays)?;
    let index = column(py, cols.topic_index).into_any();
    let mut items = vec![columns.into_any(), index, topics.into_any()];
    if let Some(fused) = fused {
        let values = PyList::empty(py);
        for (s, e) in fused.values {
            values.append((s.into_pyarray(py), e.into_pyarray(py)))?;
        }
        let mut parsed = vec![values.into_any(), fused.hashes.into_pyarray(py).into_any(),
                              fused.exact.into_pyarray(py).into_any()];
        if keys.is_some() {
            parsed.push(PyTuple::new(py, [
                fused.key_owner.into_pyarray(py).into_any(),
                fused.key_starts.into_pyarray(py).into_any(),
                fused.key_ends.into_pyarray(py).into_any(),
                fused.key_hashes.into_pyarray(py).into_any(),
                fused.key_exact.into_pyarray(py).into_any(),
            ])?.into_any());
        }
        items.push(PyTuple::new(py, parsed)?.into_any());
    }
    Ok(Some(PyTuple::new(py, items)?))
}

/// CRC-32 (zlib's function) of `buf[starts[i]:ends[i]]` for every i, as int64; a range that is
/// not inside the buffer gives -1.
#[pyfunction]
fn crc32_ranges<'py>(
    py: Python<'py>,
    buf: &Bound<'py, PyAny>,
    starts: numpy::PyReadonlyArray1<'py, i64>,
    ends: numpy::PyReadonlyArray1<'py, i64>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let bytes = Bytes::get(buf)?;
    let (starts, ends) = ranges(&starts, &ends)?;
    let data = bytes.slice();
    let out = py.detach(|| {
        guarded("crc32_ranges", || {
            starts
                .iter()
                .zip(ends.iter())
                .map(|(&s, &e)| walk::crc_of(data, s, e).map_or(-1, |c| c as i64))
                .collect::<Vec<i64>>()
        })
    })?;
    Ok(out.into_pyarray(py))
}

/// Unsigned String.hashCode of the UTF-8 strings `data[starts[i]:ends[i]]`, continued from
/// `prefix[i]` when given (`mqtool.codec.java_hashes`' contract): (hashes uint32, exact bool);
/// exact is False where the bytes are not well-formed UTF-8 of 1- to 3-byte sequences (or the
/// range is not inside the buffer), for the caller to hash through Python's decoder.
#[pyfunction]
#[pyo3(signature = (data, starts, ends, prefix=None))]
fn java_hashes<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    starts: numpy::PyReadonlyArray1<'py, i64>,
    ends: numpy::PyReadonlyArray1<'py, i64>,
    prefix: Option<numpy::PyReadonlyArray1<'py, u32>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let bytes = Bytes::get(data)?;
    let (starts, ends) = (slice_of(&starts)?, slice_of(&ends)?);
    let prefix = match prefix {
        Some(p) => Some(p.as_slice()?.to_vec()),
        None => None,
    };
    if starts.len() != ends.len() || prefix.as_ref().is_some_and(|p| p.len() != starts.len()) {
        return Err(PyValueError::new_err("starts, ends and prefix differ in length"));
    }
    let text = bytes.slice();
    let (hashes, exact) = py.detach(|| {
        guarded("java_hashes", || {
            let mut hashes = Vec::with_capacity(starts.len());
            let mut exact = Vec::with_capacity(starts.len());
            for (i, (&s, &e)) in starts.iter().zip(ends.iter()).enumerate() {
                let start = prefix.as_ref().map_or(0, |p| p[i]);
                let (h, ok) = hashcode::java_hash(text, s, e, start);
                hashes.push(h);
                exact.push(ok);
            }
            (hashes, exact)
        })
    })?;
    PyTuple::new(py, [hashes.into_pyarray(py).into_any(), exact.into_pyarray(py).into_any()])
}

/// For the records of a property blob (`mqtool.codec.property_blob`), the value span of each
/// name (`codec.property_values`' contract): a list, per name, of (starts, ends) int64, -1
/// where a record has no such non-empty property; a later pair wins.
#[pyfunction]
fn property_values<'py>(
    py: Python<'py>,
    blob: &Bound<'py, PyAny>,
    begins: numpy::PyReadonlyArray1<'py, i64>,
    patterns: Vec<Vec<u8>>,
) -> PyResult<Bound<'py, PyList>> {
    let bytes = Bytes::get(blob)?;
    let begins = slice_of(&begins)?;
    let data = bytes.slice();
    let spans = py.detach(|| {
        guarded("property_values", || hashcode::property_values(data, &begins, &patterns))
    })?;
    let out = PyList::empty(py);
    for (starts, ends) in spans {
        out.append((starts.into_pyarray(py), ends.into_pyarray(py)))?;
    }
    Ok(out)
}

fn slice_of<'py>(a: &numpy::PyReadonlyArray1<'py, i64>) -> PyResult<Vec<i64>> {
    Ok(a.as_slice()?.to_vec())
}

/// The (start, end) columns of byte ranges, copied out of Python, refused unless equally long.
fn ranges<'py>(starts: &numpy::PyReadonlyArray1<'py, i64>,
               ends: &numpy::PyReadonlyArray1<'py, i64>) -> PyResult<(Vec<i64>, Vec<i64>)> {
    let (starts, ends) = (slice_of(starts)?, slice_of(ends)?);
    if starts.len() != ends.len() {
        return Err(PyValueError::new_err("starts and ends differ in length"));
    }
    Ok((starts, ends))
}

/// The properties `buf[starts[i]:ends[i]]` of many records copied into one blob, each between
/// two separators, and the value span of each pattern's property per record (the contract of
/// `codec.property_values` over `codec.property_blob`, without the blob's padding):
/// (blob uint8, begins int64, [(starts, ends) int64 per pattern]).
#[pyfunction]
fn property_spans<'py>(
    py: Python<'py>,
    buf: &Bound<'py, PyAny>,
    starts: numpy::PyReadonlyArray1<'py, i64>,
    ends: numpy::PyReadonlyArray1<'py, i64>,
    patterns: Vec<Vec<u8>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let bytes = Bytes::get(buf)?;
    let (starts, ends) = ranges(&starts, &ends)?;
    let data = bytes.slice();
    let spans = py.detach(|| {
        guarded("property_spans", || props::property_spans(data, &starts, &ends, &patterns))
    })?;
    let values = PyList::empty(py);
    for (s, e) in spans.values {
        values.append((s.into_pyarray(py), e.into_pyarray(py)))?;
    }
    PyTuple::new(py, [spans.blob.into_pyarray(py).into_any(),
                      spans.begins.into_pyarray(py).into_any(), values.into_any()])
}

/// `codec.index_key_spans`' contract: (owner, starts, ends) int64 of each record's UNIQ_KEY and
/// KEYS items split at `separator`, in buildIndex's order.
#[pyfunction]
fn index_key_spans<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    u_starts: numpy::PyReadonlyArray1<'py, i64>,
    u_ends: numpy::PyReadonlyArray1<'py, i64>,
    k_starts: numpy::PyReadonlyArray1<'py, i64>,
    k_ends: numpy::PyReadonlyArray1<'py, i64>,
    separator: u8,
) -> PyResult<Bound<'py, PyTuple>> {
    let bytes = Bytes::get(data)?;
    let (us, ue) = (slice_of(&u_starts)?, slice_of(&u_ends)?);
    let (ks, ke) = (slice_of(&k_starts)?, slice_of(&k_ends)?);
    let n = us.len();
    if ue.len() != n || ks.len() != n || ke.len() != n {
        return Err(PyValueError::new_err("the spans differ in length"));
    }
    let text = bytes.slice();
    let (owner, starts, ends) = py.detach(|| {
        guarded("index_key_spans", || {
            props::index_key_spans(text, (&us, &ue), (&ks, &ke), separator)
        })
    })?;
    PyTuple::new(py, [owner.into_pyarray(py).into_any(), starts.into_pyarray(py).into_any(),
                      ends.into_pyarray(py).into_any()])
}

/// True when `mqtool.verify.index._check_index_chains` would find nothing in the entries of an
/// IndexFile (`index::chains_clean`); False means: let the reference check them.
#[pyfunction]
#[pyo3(signature = (path, entries_start, n, slot_values, count, slots))]
fn index_chains_clean<'py>(
    py: Python<'py>,
    path: String,
    entries_start: u64,
    n: usize,
    slot_values: numpy::PyReadonlyArray1<'py, i32>,
    count: i64,
    slots: i64,
) -> PyResult<bool> {
    let slot_values = slot_values.as_slice()?.to_vec();
    py.detach(|| {
        guarded("index_chains_clean", || {
            index::chains_clean(&path, entries_start, n, &slot_values, count, slots)
        })
    })
}

/// `index::join_sorted` over numpy arrays: (j, after) int64.
#[pyfunction]
#[pyo3(signature = (records, probes, first_only))]
fn join_sorted<'py>(
    py: Python<'py>,
    records: numpy::PyReadonlyArray1<'py, i64>,
    probes: numpy::PyReadonlyArray1<'py, i64>,
    first_only: bool,
) -> PyResult<Bound<'py, PyTuple>> {
    let (records, probes) = (records.as_slice()?, probes.as_slice()?);
    let (j, after) = guarded("join_sorted", || index::join_sorted(records, probes, first_only))?;
    PyTuple::new(py, [j.into_pyarray(py).into_any(), after.into_pyarray(py).into_any()])
}

/// `index::join_groups` over numpy arrays: (j, after) int64 indexing `records` as a whole.
#[pyfunction]
#[pyo3(signature = (records, rstarts, probes, pstarts, first_only))]
fn join_groups<'py>(
    py: Python<'py>,
    records: numpy::PyReadonlyArray1<'py, i64>,
    rstarts: numpy::PyReadonlyArray1<'py, i64>,
    probes: numpy::PyReadonlyArray1<'py, i64>,
    pstarts: numpy::PyReadonlyArray1<'py, i64>,
    first_only: bool,
) -> PyResult<Bound<'py, PyTuple>> {
    let (records, rstarts) = (records.as_slice()?, rstarts.as_slice()?);
    let (probes, pstarts) = (probes.as_slice()?, pstarts.as_slice()?);
    let (j, after) = guarded("join_groups", || {
        index::join_groups(records, rstarts, probes, pstarts, first_only)
    })?
    .ok_or_else(|| PyValueError::new_err("native join_groups: group bounds outside the arrays"))?;
    PyTuple::new(py, [j.into_pyarray(py).into_any(), after.into_pyarray(py).into_any()])
}

/// The layout this module was written for, for Python to compare with the declarations.
#[pyfunction]
fn layout(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("magic_v1", walk::MAGIC_V1)?;
    d.set_item("magic_v2", walk::MAGIC_V2)?;
    d.set_item("header_size", walk::HEADER_SIZE)?;
    d.set_item("header_fields", walk::HEADER_FIELDS.to_vec())?;
    let middles = PyDict::new(py);
    for flags in [0, walk::BORNHOST_V6_FLAG, walk::STOREHOST_V6_FLAG, walk::HOST_FLAGS] {
        let (ts, reconsume, prepared, body) = walk::middle_offsets(flags);
        middles.set_item(flags, (walk::middle_size(flags), ts, reconsume, prepared, body))?;
    }
    d.set_item("middles", middles)?;
    d.set_item("min_message_size", walk::MIN_MESSAGE_SIZE)?;
    d.set_item("prop_crc_prefix", PyBytes::new(py, walk::PROP_CRC_PREFIX))?;
    d.set_item("crc32_reserved_len", walk::CRC32_RESERVED_LEN)?;
    d.set_item("dledger_magic", walk::DL_ENTRY_MAGIC)?;
    d.set_item("dledger_header_size", walk::DL_HEADER_SIZE)?;
    d.set_item("dledger_header_fields", walk::DL_HEADER_FIELDS.to_vec())?;
    d.set_item("flags", (walk::FLAG_NONE, walk::FLAG_FALSE, walk::FLAG_TRUE))?;
    Ok(d)
}

/// A panic on purpose, to test that it reaches Python as a ValueError.
#[pyfunction]
fn _panic_for_test() -> PyResult<()> {
    guarded("self-test", || panic!("deliberate"))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    quiet_panics();
    m.add_function(wrap_pyfunction!(scan_run, m)?)?;
    m.add_function(wrap_pyfunction!(crc32_ranges, m)?)?;
    m.add_function(wrap_pyfunction!(java_hashes, m)?)?;
    m.add_function(wrap_pyfunction!(property_values, m)?)?;
    m.add_function(wrap_pyfunction!(property_spans, m)?)?;
    m.add_function(wrap_pyfunction!(index_key_spans, m)?)?;
    m.add_function(wrap_pyfunction!(index_chains_clean, m)?)?;
    m.add_function(wrap_pyfunction!(join_sorted, m)?)?;
    m.add_function(wrap_pyfunction!(join_groups, m)?)?;
    m.add_function(wrap_pyfunction!(_panic_for_test, m)?)?;
    m.add("MIN_MESSAGE_SIZE", walk::MIN_MESSAGE_SIZE)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(layout, m)?)?;
    Ok(())
}
