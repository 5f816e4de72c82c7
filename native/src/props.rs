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

/// Where the first property separator of `bytes` is, eight bytes at a time (the lowest byte
/// that equals it is the lowest one the zero-byte test flags).
fn find_separator(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let pattern = ONES * PROPERTY_SEPARATOR as u64;
    let mut words = bytes.chunks_exact(8);
    for (k, word) in words.by_ref().enumerate() {
        let w = u64::from_le_bytes(word.try_into().expect("eight bytes")) ^ pattern;
        let zero = w.wrapping_sub(ONES) & !w & HIGHS;
        if zero != 0 {
            return Some(k * 8 + (zero.trailing_zeros() / 8) as usize);
        }
    }
    let done = bytes.len() - words.remainder().len();
    words.remainder().iter().position(|&b| b == PROPERTY_SEPARATOR).map(|k| done + k)
}

/// Finds the value of each pattern (name + 0x01) in one record's properties: a segment (bytes
/// between 0x02 separators) holds a pattern when it starts with it and is longer; a later
/// segment wins (`codec.property_values`' rule).
pub struct Matcher<'a> {
    patterns: &'a [Vec<u8>],
    /// which patterns a segment's first byte can start (most segments start none)
    by_first: [u64; 256],
    /// patterns the table cannot hold (empty ones, or past the 64th): checked on every segment
    others: Vec<usize>,
}

impl<'a> Matcher<'a> {
    pub fn new(patterns: &'a [Vec<u8>]) -> Self {
        let mut by_first: [u64; 256] = [0; 256];
        for (k, pattern) in patterns.iter().enumerate().take(64) {
            if let Some(&b) = pattern.first() {
                by_first[b as usize] |= 1 << k;
            }
        }
        let others = (0..patterns.len()).filter(|&k| k >= 64 || patterns[k].is_empty()).collect();
        Matcher { patterns, by_first, others }
    }

    /// Calls `found(k, start, end)` with the value span (in `bytes`) of every segment that holds
    /// pattern k, in segment order (so the last call for a k is the value that wins).
    pub fn each(&self, bytes: &[u8], mut found: impl FnMut(usize, usize, usize)) {
        let mut seg = 0usize;
        loop {
            let end = find_separator(&bytes[seg..]).map_or(bytes.len(), |k| seg + k);
            let segment = &bytes[seg..end];
            let mut check = |k: usize| {
                let pattern = &self.patterns[k];
                if segment.len() > pattern.len() && segment.starts_with(pattern) {
                    found(k, seg + pattern.len(), end);
                }
            };
            let mut candidates = segment.first().map_or(0, |&b| self.by_first[b as usize]);
            while candidates != 0 {
                let k = candidates.trailing_zeros() as usize;
                candidates &= candidates - 1;
                check(k);
            }
            for &k in &self.others {
                check(k);
            }
            if end >= bytes.len() {
                break;
            }
            seg = end + 1;
        }
    }
}

/// `property_values(*property_blob(data, starts, ends))` in one pass: the properties of record
/// i are `data[starts[i]..ends[i]]`, parsed by [`Matcher`].
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
    let matcher = Matcher::new(patterns);
    for i in 0..n {
        let bytes = clamped(data, starts[i], ends[i]);
        let begin = blob.len();
        begins.push(begin as i64);
        blob.extend_from_slice(bytes);
        matcher.each(bytes, |k, s, e| {
            values[k].0[i] = (begin + s) as i64;
            values[k].1[i] = (begin + e) as i64;
        });
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

#[cfg(test)]
mod tests {
    use super::find_separator;

    #[test]
    fn find_separator_is_the_first_separator() {
        let mut bytes = vec![0u8; 40];
        for len in 0..40 {
            for at in 0..len {
                for fill in [0u8, 1, 3, 0x82, 0xFF] {
                    bytes.iter_mut().for_each(|b| *b = fill);
                    bytes[at] = 2;
                    if at + 1 < len {
                        bytes[at + 1] = 2;
                    }
                    assert_eq!(find_separator(&bytes[..len]), Some(at));
                }
            }
            bytes.iter_mut().for_each(|b| *b = 3);
            assert_eq!(find_separator(&bytes[..len]), None);
        }
    }
}
