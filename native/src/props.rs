//! The properties of many records read straight from the CommitLog buffer: the values the
//! checks and indexes need, and the keys buildIndex puts (`mqtool.codec`'s `property_blob`,
//! `property_values` and `index_key_spans`, which stay the reference).

use crate::walk::PROPERTY_SEPARATOR;

/// The bytes `data[s..e]`, empty where the range is not a range of `data` (a negative or
/// reversed range, or one past the end is cut at the end, as Python's slicing does).
fn clamped(data: &[u8], s: i64, e: i64) -> &[u8] {
    let Ok(s) = usize::try_from(s) else { return &[] };
    let e = usize::try_from(e).unwrap_or(0).min(data.len());
    if s >= e {
        return &[];
    }
    data.get(s..e).unwrap_or(&[])
}

/// The spans of a blob and the value of each pattern's property per record.
pub struct Spans {
    /// each record's properties between two separators: SEP p0 SEP p1 SEP ... pn SEP
    pub blob: Vec<u8>,
    pub begins: Vec<i64>,
    /// per pattern: (value starts, value ends) in the blob, -1 where absent
    pub values: Vec<(Vec<i64>, Vec<i64>)>,
}

/// `property_values(*property_blob(data, starts, ends))` in one pass: the properties of record
/// i are `data[starts[i]..ends[i]]`; a segment (bytes between separators) holds a pattern
/// (name + 0x01) when it starts with it and is longer; a later segment wins.
pub fn property_spans(data: &[u8], starts: &[i64], ends: &[i64], patterns: &[Vec<u8>]) -> Spans {
    let n = starts.len();
    let mut total = 1usize;
    for i in 0..n {
        total = total.saturating_add(clamped(data, starts[i], ends[i]).len() + 1);
    }
    let mut blob = Vec::with_capacity(total);
    blob.push(PROPERTY_SEPARATOR);
    let mut begins = Vec::with_capacity(n);
    let mut values: Vec<(Vec<i64>, Vec<i64>)> =
        patterns.iter().map(|_| (vec![-1i64; n], vec![-1i64; n])).collect();
    // which patterns a segment's first byte can start (most segments start none)
    let mut by_first: [u64; 256] = [0; 256];
    for (k, pattern) in patterns.iter().enumerate().take(64) {
        if let Some(&b) = pattern.first() {
            by_first[b as usize] |= 1 << k;
        }
    }
    let empty_patterns: Vec<usize> =
        (0..patterns.len()).filter(|&k| k >= 64 || patterns[k].is_empty()).collect();
    for i in 0..n {
        let bytes = clamped(data, starts[i], ends[i]);
        let begin = blob.len();
        begins.push(begin as i64);
        blob.extend_from_slice(bytes);
        let mut seg = 0usize;
        loop {
            let end = bytes[seg..].iter().position(|&b| b == PROPERTY_SEPARATOR)
                .map_or(bytes.len(), |k| seg + k);
            let segment = &bytes[seg..end];
            let mut candidates = segment.first().map_or(0, |&b| by_first[b as usize]);
            let mut check = |k: usize| {
                let pattern = &patterns[k];
                if segment.len() > pattern.len() && segment.starts_with(pattern) {
                    values[k].0[i] = (begin + seg + pattern.len()) as i64;
                    values[k].1[i] = (begin + end) as i64;
                }
            };
            while candidates != 0 {
                let k = candidates.trailing_zeros() as usize;
                candidates &= candidates - 1;
                check(k);
            }
            for &k in &empty_patterns {
                check(k);
            }
            if end >= bytes.len() {
                break;
            }
            seg = end + 1;
        }
        blob.push(PROPERTY_SEPARATOR);
    }
    Spans { blob, begins, values }
}

/// `codec.index_key_spans`: (owner, start, end) of the keys buildIndex puts for each record,
/// in its order: the record's UNIQ_KEY (where its start is not negative), then the non-empty
/// pieces of its KEYS split at `separator`.
pub fn index_key_spans(data: &[u8], uniq: (&[i64], &[i64]), keys: (&[i64], &[i64]),
                       separator: u8) -> (Vec<i64>, Vec<i64>, Vec<i64>) {
    let n = uniq.0.len();
    let (mut owner, mut starts, mut ends) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        if uniq.0[i] >= 0 {
            owner.push(i as i64);
            starts.push(uniq.0[i]);
            ends.push(uniq.1[i]);
        }
        let (s, e) = (keys.0[i], keys.1[i]);
        if s < 0 {
            continue;
        }
        let bytes = clamped(data, s, e);
        let mut at = 0usize;
        while at < bytes.len() {
            if bytes[at] == separator {
                at += 1;
                continue;
            }
            let stop = bytes[at..].iter().position(|&b| b == separator)
                .map_or(bytes.len(), |k| at + k);
            owner.push(i as i64);
            starts.push(s + at as i64);
            ends.push(s + stop as i64);
            at = stop;
        }
    }
    (owner, starts, ends)
}
