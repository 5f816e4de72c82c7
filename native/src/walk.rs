//! The record walk, without Python: bytes in, columns out.
//!
//! Offsets and sizes mirror the declarations in `formats/commitlog.py` and `formats/dledger.py`;
//! `layout()` hands them to Python, which refuses this module (numpy path) when they differ
//! from what it derives from the declarations.

use std::collections::HashMap;

use crate::hashcode::java_hash;
use crate::props::Matcher;

/// the magic codes, read as unsigned (the declaration's Int32ub)
pub const MAGIC_V1: u32 = 0xDAA320A7;
pub const MAGIC_V2: u32 = 0xDAA320AB;
/// total_size .. born_timestamp
pub const HEADER_SIZE: i64 = 48;
/// fields of the header: (name, offset, size)
pub const HEADER_FIELDS: [(&str, usize, usize); 9] = [
    ("total_size", 0, 4),
    ("magic_code", 4, 4),
    ("body_crc", 8, 4),
    ("queue_id", 12, 4),
    ("flag", 16, 4),
    ("queue_offset", 20, 8),
    ("physical_offset", 28, 8),
    ("sys_flag", 36, 4),
    ("born_timestamp", 40, 8),
];
/// sys_flag bits of an IPv6 born host / store host
pub const BORNHOST_V6_FLAG: i32 = 0x1 << 4;
pub const STOREHOST_V6_FLAG: i32 = 0x1 << 5;
pub const HOST_FLAGS: i32 = BORNHOST_V6_FLAG | STOREHOST_V6_FLAG;
/// calMsgLength of a V1 record with IPv4 hosts and nothing variable
pub const MIN_MESSAGE_SIZE: i64 = 91;
pub const PROP_CRC_PREFIX: &[u8] = b"__CRC32#\x01";
pub const PROPERTY_SEPARATOR: u8 = 0x02;
pub const CRC32_RESERVED_LEN: i64 = 20;
pub const CRC32_MASK: u32 = 0x7FFF_FFFF;
pub const DL_ENTRY_MAGIC: i32 = 1;
pub const DL_HEADER_SIZE: i64 = 48;
/// fields of a DLedger entry header: (name, offset, size)
pub const DL_HEADER_FIELDS: [(&str, usize, usize); 9] = [
    ("magic", 0, 4),
    ("size", 4, 4),
    ("index", 8, 8),
    ("term", 16, 8),
    ("pos", 24, 8),
    ("channel", 32, 4),
    ("chain_crc", 36, 4),
    ("body_crc", 40, 4),
    ("body_size", 44, 4),
];
pub const FLAG_NONE: i8 = -1;
pub const FLAG_FALSE: i8 = 0;
pub const FLAG_TRUE: i8 = 1;

fn host_size(sys_flag: i32, v6_flag: i32) -> i64 {
    if sys_flag & v6_flag != 0 {
        16 + 4
    } else {
        4 + 4
    }
}

/// Size of born_host .. body_length for these host flags.
pub fn middle_size(sys_flag: i32) -> i64 {
    host_size(sys_flag, BORNHOST_V6_FLAG) + 8 + host_size(sys_flag, STOREHOST_V6_FLAG) + 4 + 8 + 4
}

/// Offsets inside the middle: (store_timestamp, reconsume_times, prepared_offset, body_length).
pub fn middle_offsets(sys_flag: i32) -> (i64, i64, i64, i64) {
    let born = host_size(sys_flag, BORNHOST_V6_FLAG);
    let store_ts = born;
    let reconsume = store_ts + 8 + host_size(sys_flag, STOREHOST_V6_FLAG);
    (store_ts, reconsume, reconsume + 4, reconsume + 12)
}

/// CommitLog.calMsgLength.
pub fn message_length(v2: bool, sys_flag: i32, body: i64, topic: i64, props: i64) -> i64 {
    HEADER_SIZE + middle_size(sys_flag) + body.max(0) + if v2 { 2 } else { 1 } + topic.max(0)
        + 2
        + props.max(0)
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    Plain,
    DLedger,
}

pub struct RunParams {
    pub pos: i64,
    pub stop: i64,
    pub limit: i64,
    pub base: i64,
    pub check_crc: bool,
    pub layout: Layout,
    pub max_records: i64,
    pub max_bytes: i64,
}

#[derive(Default)]
pub struct Columns {
    pub position: Vec<i64>,
    pub total_size: Vec<i64>,
    pub magic_code: Vec<i64>,
    pub body_crc: Vec<i64>,
    pub queue_id: Vec<i64>,
    pub flag: Vec<i64>,
    pub queue_offset: Vec<i64>,
    pub physical_offset: Vec<i64>,
    pub sys_flag: Vec<i64>,
    pub born_timestamp: Vec<i64>,
    pub store_timestamp: Vec<i64>,
    pub reconsume_times: Vec<i64>,
    pub prepared_transaction_offset: Vec<i64>,
    pub body_length: Vec<i64>,
    pub body_position: Vec<i64>,
    pub properties_position: Vec<i64>,
    pub properties_length: Vec<i64>,
    pub body_crc_ok: Vec<i8>,
    pub prop_crc_ok: Vec<i8>,
    pub topic_index: Vec<i32>,
    /// the distinct topics of the run: (start, length) of their first occurrence
    pub topics: Vec<(usize, usize)>,
    /// each record's topic (start, length), until the run's topics are interned
    topic_spans: Vec<(usize, usize)>,
    /// what the fused pass adds (`Extras`), when asked
    pub fused: Option<Fused>,
}

/// What one pass over the records can add to the columns: the value spans (buffer positions) of
/// `patterns` in each record's properties (`props::Matcher`), and the String.hashCode of the
/// value of pattern `hash` (`hashcode::java_hash`).
pub struct Extras<'a> {
    pub patterns: &'a [Vec<u8>],
    pub hash: Option<usize>,
    /// the keys buildIndex puts (`props::index_key_spans`' order): the patterns of UNIQ_KEY and
    /// KEYS and the KEYS separator; each hashed as `topic#key`
    pub keys: Option<(usize, usize, u8)>,
}

/// The fused columns: per pattern (starts, ends), -1 where absent; the hashes and whether each
/// is exact (false also where the value is absent).
#[derive(Default)]
pub struct Fused {
    pub values: Vec<(Vec<i64>, Vec<i64>)>,
    pub hashes: Vec<u32>,
    pub exact: Vec<bool>,
    /// per key (`Extras::keys`): its record, its span, String.hashCode of `topic#key` and
    /// whether that is exact (topic and key well-formed 1- to 3-byte UTF-8)
    pub key_owner: Vec<i64>,
    pub key_starts: Vec<i64>,
    pub key_ends: Vec<i64>,
    pub key_hashes: Vec<u32>,
    pub key_exact: Vec<bool>,
}

impl Columns {
    /// `other`'s records after this one's (the topics are interned after the merge).
    fn append(&mut self, mut other: Columns) {
        let before = self.position.len() as i64;
        macro_rules! extend {
            ($($f:ident),*) => { $( self.$f.append(&mut other.$f); )* };
        }
        extend!(position, total_size, magic_code, body_crc, queue_id, flag, queue_offset,
                physical_offset, sys_flag, born_timestamp, store_timestamp, reconsume_times,
                prepared_transaction_offset, body_length, body_position, properties_position,
                properties_length, body_crc_ok, prop_crc_ok, topic_spans);
        if let (Some(mine), Some(theirs)) = (self.fused.as_mut(), other.fused.as_mut()) {
            for (m, t) in mine.values.iter_mut().zip(theirs.values.iter_mut()) {
                m.0.append(&mut t.0);
                m.1.append(&mut t.1);
            }
            mine.hashes.append(&mut theirs.hashes);
            mine.exact.append(&mut theirs.exact);
            mine.key_owner.extend(theirs.key_owner.iter().map(|&o| o + before));
            mine.key_starts.append(&mut theirs.key_starts);
            mine.key_ends.append(&mut theirs.key_ends);
            mine.key_hashes.append(&mut theirs.key_hashes);
            mine.key_exact.append(&mut theirs.key_exact);
        }
    }
}

// --- checked big-endian reads: None outside the buffer ----------------------------------------

fn at(data: &[u8], pos: i64, len: usize) -> Option<&[u8]> {
    let start = usize::try_from(pos).ok()?;
    data.get(start..start.checked_add(len)?)
}

pub fn i8_at(data: &[u8], pos: i64) -> Option<i64> {
    at(data, pos, 1).map(|b| b[0] as i8 as i64)
}

pub fn i16_at(data: &[u8], pos: i64) -> Option<i64> {
    at(data, pos, 2).map(|b| i16::from_be_bytes([b[0], b[1]]) as i64)
}

pub fn i32_at(data: &[u8], pos: i64) -> Option<i32> {
    at(data, pos, 4).map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

pub fn i64_at(data: &[u8], pos: i64) -> Option<i64> {
    at(data, pos, 8).map(|b| i64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
}

/// zlib's CRC-32 of data[start..end]; None when the range is not inside the buffer.
pub fn crc_of(data: &[u8], start: i64, end: i64) -> Option<u32> {
    let s = usize::try_from(start).ok()?;
    let e = usize::try_from(end).ok()?;
    if s > e {
        return None;
    }
    let bytes = data.get(s..e)?;
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(bytes);
    Some(hasher.finalize())
}

// --- the walk ---------------------------------------------------------------------------------

/// Record starts from `pos`, following TOTALSIZE while it is at least a minimal record
/// (`batches._walk`), and where the walk would go on.
fn walk_plain(data: &[u8], pos: i64, walk_end: i64, max_records: i64) -> (Vec<i64>, i64) {
    let mut out = Vec::new();
    let mut p = pos;
    while (out.len() as i64) < max_records && p < walk_end {
        let Some(size) = i32_at(data, p) else { break };
        let size = size as i64;
        if size < MIN_MESSAGE_SIZE {
            break;
        }
        out.push(p);
        p += size;
    }
    (out, p)
}

/// The record starts (entry + 48) of the DLedger entries from `pos` that `entry_problem`
/// accepts (`batches._walk_entries`), and where the walk would go on.
fn walk_entries(data: &[u8], pos: i64, walk_end: i64, limit: i64, max_records: i64, base: i64)
    -> (Vec<i64>, i64) {
    let mut out = Vec::new();
    let mut p = pos;
    while (out.len() as i64) < max_records {
        if p >= walk_end || p + DL_HEADER_SIZE + HEADER_SIZE > limit {
            break;
        }
        let (Some(magic), Some(size), Some(entry_pos), Some(body_size), Some(record_size)) = (
            i32_at(data, p),
            i32_at(data, p + 4),
            i64_at(data, p + 24),
            i32_at(data, p + 44),
            i32_at(data, p + DL_HEADER_SIZE),
        ) else {
            break;
        };
        let (size, body_size) = (size as i64, body_size as i64);
        if magic != DL_ENTRY_MAGIC
            || Some(entry_pos) != base.checked_add(p)
            || size != DL_HEADER_SIZE + body_size
            || body_size < MIN_MESSAGE_SIZE
            || p + size > limit
            || record_size as i64 != body_size
        {
            break;
        }
        out.push(p + DL_HEADER_SIZE);
        p += size;
    }
    (out, p)
}

/// The walk of a run, a block of records at a time.
struct Walk<'a> {
    data: &'a [u8],
    params: &'a RunParams,
    limit: i64,
    stop: i64,
    walk_end: i64,
    next: i64,
    left: i64,
    done: bool,
}

impl Walk<'_> {
    /// The next (at most) `block` record starts; empty at the end of the walk.
    fn block(&mut self, block: i64) -> Vec<i64> {
        if self.done || self.left <= 0 {
            return Vec::new();
        }
        let want = block.min(self.left);
        let (found, next) = match self.params.layout {
            Layout::Plain => walk_plain(self.data, self.next, self.walk_end, want),
            Layout::DLedger => {
                let (mut found, next) = walk_entries(self.data, self.next, self.walk_end,
                                                     self.limit, want, self.params.base);
                let keep = found.iter().take_while(|&&p| p < self.stop).count();
                if keep < found.len() {
                    found.truncate(keep);
                    self.done = true;
                }
                (found, next)
            }
        };
        if (found.len() as i64) < want {
            self.done = true;
        }
        self.left -= found.len() as i64;
        self.next = next;
        found
    }
}

struct TopicInterner<'a> {
    data: &'a [u8],
    by_bytes: HashMap<&'a [u8], i32>,
    last: Option<(&'a [u8], i32)>,
    topics: Vec<(usize, usize)>,
    /// topics met recently, by a cheap hash of length and end bytes: most records hit here
    /// and skip the map's (DoS-resistant, slower) hash
    recent: [Option<(&'a [u8], i32)>; 256],
}

impl<'a> TopicInterner<'a> {
    fn new(data: &'a [u8]) -> Self {
        TopicInterner { data, by_bytes: HashMap::new(), last: None, topics: Vec::new(),
                        recent: [None; 256] }
    }
}

impl<'a> TopicInterner<'a> {
    fn id(&mut self, start: usize, len: usize) -> i32 {
        let raw = self.data.get(start..start.saturating_add(len)).unwrap_or(&[]);
        if let Some((last, id)) = self.last {
            if last == raw {
                return id;
            }
        }
        let slot = (raw.len()
            ^ raw.first().map_or(0, |&b| b as usize * 7)
            ^ raw.last().map_or(0, |&b| b as usize * 31)
            ^ raw.get(raw.len() / 2).map_or(0, |&b| b as usize * 131)) & 255;
        if let Some((seen, id)) = self.recent[slot] {
            if seen == raw {
                self.last = Some((raw, id));
                return id;
            }
        }
        let next = self.topics.len() as i32;
        let id = *self.by_bytes.entry(raw).or_insert(next);
        if id == next {
            self.topics.push((start, len));
        }
        self.last = Some((raw, id));
        self.recent[slot] = Some((raw, id));
        id
    }
}

/// The run of records from `params.pos` that decode_message accepts, as columns; None when the
/// record at `pos` is not one (`batches._fast_batch`). With `extras`, the same pass adds the
/// property spans and hashes; with `threads` > 1 the records found by the (sequential) walk
/// are decoded in that many pieces at once, merged in order up to the first refused record:
/// the same run a single thread finds.
pub fn run(data: &[u8], params: &RunParams, extras: Option<&Extras>, threads: usize,
           min_piece: usize) -> Option<Columns> {
    let len = data.len() as i64;
    let limit = params.limit.min(len);
    let pos = params.pos;
    if pos < 0 || pos >= limit || params.max_records <= 0 {
        return None;
    }
    let stop = params.stop.min(limit);
    let walk_end = stop.min(limit - HEADER_SIZE + 1).min(pos.saturating_add(params.max_bytes));
    let mut walk = Walk { data, params, limit, stop, walk_end, next: pos,
                          left: params.max_records, done: false };
    let mut c = if threads <= 1 {
        // walk a block, decode it while its bytes are in the cache, and so on
        let mut c: Option<Columns> = None;
        loop {
            let positions = walk.block(BLOCK);
            if positions.is_empty() {
                break;
            }
            let c = c.get_or_insert_with(|| Columns::new(extras));
            if !decode_into(data, &positions, limit, params.check_crc, extras, c) {
                break;
            }
        }
        c?
    } else {
        let positions = walk.block(i64::MAX);
        if positions.is_empty() {
            return None;
        }
        decode_pieces(data, &positions, limit, params.check_crc, extras, threads, min_piece)
    };
    if c.position.is_empty() {
        return None;
    }
    let mut interner = TopicInterner::new(data);
    c.topic_index = c.topic_spans.iter().map(|&(s, l)| interner.id(s, l)).collect();
    c.topic_spans = Vec::new();
    c.topics = interner.topics;
    Some(c)
}

/// Records walked and then decoded at a time on one thread.
const BLOCK: i64 = 1024;

/// `decode` of `positions` in up to `threads` pieces of `min_piece` records at least, at once,
/// merged in order up to the first refused record.
fn decode_pieces(data: &[u8], positions: &[i64], limit: i64, check_crc: bool,
                 extras: Option<&Extras>, threads: usize, min_piece: usize) -> Columns {
    let pieces = threads.clamp(1, 64).min(positions.len() / min_piece.max(1)).max(1);
    if pieces == 1 {
        return decode(data, positions, limit, check_crc, extras).0;
    }
    let size = positions.len().div_ceil(pieces);
    let decoded: Vec<(Columns, bool)> = std::thread::scope(|scope| {
        let handles: Vec<_> = positions.chunks(size)
            .map(|piece| scope.spawn(move || decode(data, piece, limit, check_crc, extras)))
            .collect();
        handles.into_iter().map(|h| h.join().expect("a decoding thread panicked")).collect()
    });
    let mut parts = decoded.into_iter();
    let (mut first, mut whole) = parts.next().expect("one piece at least");
    for (part, complete) in parts {
        if !whole {
            break;
        }
        first.append(part);
        whole = complete;
    }
    first
}

/// The records at `positions` that decode_message accepts, up to the first it refuses: (the
/// columns, whether every one was accepted).
fn decode(data: &[u8], positions: &[i64], limit: i64, check_crc: bool, extras: Option<&Extras>)
    -> (Columns, bool) {
    let mut c = Columns::new(extras);
    let whole = decode_into(data, positions, limit, check_crc, extras, &mut c);
    (c, whole)
}

impl Columns {
    fn new(extras: Option<&Extras>) -> Columns {
        Columns {
            fused: extras.map(|e| Fused {
                values: e.patterns.iter().map(|_| (Vec::new(), Vec::new())).collect(),
                ..Fused::default()
            }),
            ..Columns::default()
        }
    }
}

/// `decode` adding to `c`: false when a record was refused.
fn decode_into(data: &[u8], positions: &[i64], limit: i64, check_crc: bool,
               extras: Option<&Extras>, c: &mut Columns) -> bool {
    let matcher = extras.map(|e| Matcher::new(e.patterns));
    let mut prefix = TopicPrefix::default();
    for &p in positions {
        if !record(data, p, limit, check_crc, c) {
            return false;
        }
        if let (Some(m), Some(e)) = (&matcher, extras) {
            properties(data, c, m, e.hash);
            if let Some(keys) = e.keys {
                index_keys(data, c, keys, &mut prefix);
            }
        }
    }
    true
}

/// The hashCode of the last topic met followed by '#', and whether it is exact.
#[derive(Default)]
struct TopicPrefix {
    topic: Option<(usize, usize)>,
    hash: (u32, bool),
}

/// The keys buildIndex puts for the record just added (`props::index_key_spans`), hashed.
fn index_keys(data: &[u8], c: &mut Columns, (uniq, keys, separator): (usize, usize, u8),
              prefix: &mut TopicPrefix) {
    let i = c.position.len() - 1;
    let (start, len) = *c.topic_spans.last().expect("a record was added");
    let fused = c.fused.as_mut().expect("the fused columns exist");
    let value = |k: usize| fused.values.get(k).map_or((-1, -1), |v| (v.0[i], v.1[i]));
    let (u, k) = (value(uniq), value(keys));
    if u.0 < 0 && k.0 < 0 {
        return;
    }
    let same = prefix.topic.is_some_and(|(s, l)| {
        l == len && data.get(s..s + l) == data.get(start..start + len)
    });
    if !same {
        let (h, exact) = java_hash(data, start as i64, (start + len) as i64, 0);
        prefix.topic = Some((start, len));
        prefix.hash = (h.wrapping_mul(31).wrapping_add(b'#' as u32), exact);
    }
    let (first, exact_topic) = prefix.hash;
    let (us, ue) = ([u.0], [u.1]);
    let (ks, ke) = ([k.0], [k.1]);
    let (_, starts, ends) = crate::props::index_key_spans(data, (&us, &ue), (&ks, &ke),
                                                          separator);
    for (&s, &e) in starts.iter().zip(ends.iter()) {
        let (h, exact) = java_hash(data, s, e, first);
        fused.key_owner.push(i as i64);
        fused.key_starts.push(s);
        fused.key_ends.push(e);
        fused.key_hashes.push(h);
        fused.key_exact.push(exact && exact_topic);
    }
}

/// The fused columns of the record just added: its property values and the hash.
fn properties(data: &[u8], c: &mut Columns, matcher: &Matcher, hash: Option<usize>) {
    let i = c.position.len() - 1;
    let at = *c.properties_position.last().expect("a record was added");
    let len = *c.properties_length.last().expect("a record was added");
    let fused = c.fused.as_mut().expect("the fused columns exist");
    let bytes = usize::try_from(at).ok()
        .and_then(|s| data.get(s..s.checked_add(usize::try_from(len).ok()?)?))
        .unwrap_or(&[]);
    for (starts, ends) in fused.values.iter_mut() {
        starts.push(-1);
        ends.push(-1);
    }
    let values = &mut fused.values;
    matcher.each(bytes, |k, s, e| {
        values[k].0[i] = at + s as i64;
        values[k].1[i] = at + e as i64;
    });
    if let Some(k) = hash {
        let (s, e) = values.get(k).map_or((-1, -1), |v| (v.0[i], v.1[i]));
        let (h, exact) = if s >= 0 { java_hash(data, s, e, 0) } else { (0, false) };
        fused.hashes.push(h);
        fused.exact.push(exact);
    }
}

/// Decodes the record at `p` into the columns when decode_message accepts it; false (nothing
/// added) when it does not.
fn record(data: &[u8], p: i64, limit: i64, check_crc: bool, c: &mut Columns) -> bool {
    let Some(header) = at(data, p, HEADER_SIZE as usize) else { return false };
    let be32 = |o: usize| i32::from_be_bytes([header[o], header[o + 1], header[o + 2], header[o + 3]]);
    let be64 = |o: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&header[o..o + 8]);
        i64::from_be_bytes(b)
    };
    let total = be32(0) as i64;
    let magic = be32(4) as u32;
    let end = p + total;
    if (magic != MAGIC_V1 && magic != MAGIC_V2) || end > limit || total < MIN_MESSAGE_SIZE {
        return false;
    }
    let sys_flag = be32(36);
    let middle = middle_size(sys_flag);
    if total < HEADER_SIZE + middle {
        return false;
    }
    let m = p + HEADER_SIZE;
    let (o_store_ts, o_reconsume, o_prepared, o_body_len) = middle_offsets(sys_flag);
    let (Some(store_ts), Some(reconsume), Some(prepared), Some(body_len)) = (
        i64_at(data, m + o_store_ts),
        i32_at(data, m + o_reconsume),
        i64_at(data, m + o_prepared),
        i32_at(data, m + o_body_len),
    ) else {
        return false;
    };
    let body_len = body_len as i64;
    let body_pos = m + middle;
    let v2 = magic == MAGIC_V2;
    let q = body_pos + body_len.max(0);
    let tls = if v2 { 2 } else { 1 };
    if q + tls > end {
        return false;
    }
    let Some(topic_len) = (if v2 { i16_at(data, q) } else { i8_at(data, q) }) else {
        return false;
    };
    let topic_pos = q + tls;
    if topic_len < 0 || topic_pos + topic_len + 2 > end {
        return false;
    }
    let Some(props_len) = i16_at(data, topic_pos + topic_len) else { return false };
    if message_length(v2, sys_flag, body_len, topic_len, props_len) != total {
        return false;
    }
    let body_crc = be32(8) as i64;
    let props_len = props_len.max(0);

    let mut body_ok = FLAG_NONE;
    if check_crc && body_len > 0 {
        body_ok = match crc_of(data, body_pos, body_pos + body_len) {
            Some(crc) => ((crc & CRC32_MASK) as i64 == body_crc) as i8,
            None => return false,
        };
    }
    let mut prop_ok = FLAG_NONE;
    if props_len >= CRC32_RESERVED_LEN {
        let tail_pos = end - CRC32_RESERVED_LEN;
        let Some(tail) = at(data, tail_pos, CRC32_RESERVED_LEN as usize) else { return false };
        if tail.starts_with(PROP_CRC_PREFIX) {
            prop_ok = match stored_prop_crc(tail) {
                None => FLAG_FALSE,
                Some(_) if !check_crc => FLAG_NONE,
                Some(stored) => match crc_of(data, p, tail_pos) {
                    Some(crc) => ((crc & CRC32_MASK) as u64 == stored) as i8,
                    None => return false,
                },
            };
        }
    }

    c.position.push(p);
    c.total_size.push(total);
    c.magic_code.push(magic as i64);
    c.body_crc.push(body_crc);
    c.queue_id.push(be32(12) as i64);
    c.flag.push(be32(16) as i64);
    c.queue_offset.push(be64(20));
    c.physical_offset.push(be64(28));
    c.sys_flag.push(sys_flag as i64);
    c.born_timestamp.push(be64(40));
    c.store_timestamp.push(store_ts);
    c.reconsume_times.push(reconsume as i64);
    c.prepared_transaction_offset.push(prepared);
    c.body_length.push(body_len);
    c.body_position.push(body_pos);
    c.properties_position.push(topic_pos + topic_len + 2);
    c.properties_length.push(props_len);
    c.body_crc_ok.push(body_ok);
    c.prop_crc_ok.push(prop_ok);
    c.topic_spans.push((topic_pos as usize, topic_len as usize));
    true
}

/// The CRC stored in a property tail (`codecs.stored_prop_crc`): prefix, ten ASCII digits
/// least-significant first, 0x02; None when malformed.
pub fn stored_prop_crc(tail: &[u8]) -> Option<u64> {
    if tail.len() != CRC32_RESERVED_LEN as usize || !tail.starts_with(PROP_CRC_PREFIX)
        || tail[tail.len() - 1] != PROPERTY_SEPARATOR {
        return None;
    }
    let digits = &tail[PROP_CRC_PREFIX.len()..tail.len() - 1];
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(digits.iter().rev().fold(0u64, |acc, d| acc * 10 + (d - b'0') as u64))
}
