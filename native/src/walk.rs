//! The record walk, without Python: bytes in, columns out.
//!
//! Offsets and sizes mirror the declarations in `formats/commitlog.py` and `formats/dledger.py`;
//! `layout()` hands them to Python, which refuses this module (numpy path) when they differ
//! from what it derives from the declarations.

use std::collections::HashMap;

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
/// (`batches._walk`).
fn walk_plain(data: &[u8], pos: i64, walk_end: i64, max_records: i64) -> Vec<i64> {
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
    out
}

/// The record starts (entry + 48) of the DLedger entries from `pos` that `entry_problem`
/// accepts (`batches._walk_entries`).
fn walk_entries(data: &[u8], pos: i64, walk_end: i64, limit: i64, max_records: i64, base: i64)
    -> Vec<i64> {
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
    out
}

struct TopicInterner<'a> {
    data: &'a [u8],
    by_bytes: HashMap<&'a [u8], i32>,
    last: Option<(&'a [u8], i32)>,
    topics: Vec<(usize, usize)>,
}

impl<'a> TopicInterner<'a> {
    fn id(&mut self, start: usize, len: usize) -> i32 {
        let raw = self.data.get(start..start.saturating_add(len)).unwrap_or(&[]);
        if let Some((last, id)) = self.last {
            if last == raw {
                return id;
            }
        }
        let next = self.topics.len() as i32;
        let id = *self.by_bytes.entry(raw).or_insert(next);
        if id == next {
            self.topics.push((start, len));
        }
        self.last = Some((raw, id));
        id
    }
}

/// The run of records from `params.pos` that decode_message accepts, as columns; None when the
/// record at `pos` is not one (`batches._fast_batch`).
pub fn run(data: &[u8], params: &RunParams) -> Option<Columns> {
    let len = data.len() as i64;
    let limit = params.limit.min(len);
    let pos = params.pos;
    if pos < 0 || pos >= limit || params.max_records <= 0 {
        return None;
    }
    let stop = params.stop.min(limit);
    let walk_end = stop.min(limit - HEADER_SIZE + 1).min(pos.saturating_add(params.max_bytes));
    let positions = match params.layout {
        Layout::Plain => walk_plain(data, pos, walk_end, params.max_records),
        Layout::DLedger => {
            let mut found =
                walk_entries(data, pos, walk_end, limit, params.max_records, params.base);
            let keep = found.iter().take_while(|&&p| p < stop).count();
            found.truncate(keep);
            found
        }
    };
    if positions.is_empty() {
        return None;
    }
    let n = positions.len();
    let mut c = Columns::default();
    for v in [
        &mut c.position, &mut c.total_size, &mut c.magic_code, &mut c.body_crc, &mut c.queue_id,
        &mut c.flag, &mut c.queue_offset, &mut c.physical_offset, &mut c.sys_flag,
        &mut c.born_timestamp, &mut c.store_timestamp, &mut c.reconsume_times,
        &mut c.prepared_transaction_offset, &mut c.body_length, &mut c.body_position,
        &mut c.properties_position, &mut c.properties_length,
    ] {
        v.reserve_exact(n);
    }
    c.body_crc_ok.reserve_exact(n);
    c.prop_crc_ok.reserve_exact(n);
    c.topic_index.reserve_exact(n);
    let mut interner =
        TopicInterner { data, by_bytes: HashMap::new(), last: None, topics: Vec::new() };
    for &p in &positions {
        if !record(data, p, limit, params.check_crc, &mut c, &mut interner) {
            break;
        }
    }
    if c.position.is_empty() {
        return None;
    }
    c.topics = interner.topics;
    Some(c)
}

/// Decodes the record at `p` into the columns when decode_message accepts it; false (nothing
/// added) when it does not.
fn record(data: &[u8], p: i64, limit: i64, check_crc: bool, c: &mut Columns,
          topics: &mut TopicInterner) -> bool {
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
    c.topic_index.push(topics.id(topic_pos as usize, topic_len as usize));
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
