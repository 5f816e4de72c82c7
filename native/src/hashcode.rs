//! Java's String.hashCode of UTF-8 bytes: the TAGS code of ConsumeQueue units and the
//! IndexFile hash of `topic#key`; and the property values those are taken from.

fn continuation(b: u8) -> bool {
    b & 0xC0 == 0x80
}

/// (hash, exact): `start * 31^n + sum(u_k * 31^(n-1-k))` over the UTF-16 units of
/// `data[s..e]` decoded as Python's strict UTF-8 decoder does; exact is false (hash 0) for bytes
/// it refuses, for 4-byte sequences (surrogate pairs, left to the caller) and for a range that
/// is not inside `data`.
pub fn java_hash(data: &[u8], s: i64, e: i64, start: u32) -> (u32, bool) {
    let (Ok(s), Ok(e)) = (usize::try_from(s), usize::try_from(e)) else { return (0, false) };
    let Some(bytes) = data.get(s..e.max(s)).filter(|_| e >= s) else { return (0, false) };
    let mut h = start;
    let mut i = 0;
    let n = bytes.len();
    while i < n {
        let b = bytes[i];
        let unit: u32;
        if b < 0x80 {
            unit = b as u32;
            i += 1;
        } else if (0xC2..=0xDF).contains(&b) {
            match bytes.get(i + 1) {
                Some(&b1) if continuation(b1) => {
                    unit = ((b as u32 & 0x1F) << 6) | (b1 as u32 & 0x3F);
                    i += 2;
                }
                _ => return (0, false),
            }
        } else if (0xE0..=0xEF).contains(&b) {
            match (bytes.get(i + 1), bytes.get(i + 2)) {
                (Some(&b1), Some(&b2))
                    if continuation(b1)
                        && continuation(b2)
                        && !(b == 0xE0 && b1 < 0xA0)
                        && !(b == 0xED && b1 > 0x9F) =>
                {
                    unit = ((b as u32 & 0x0F) << 12) | ((b1 as u32 & 0x3F) << 6) | (b2 as u32 & 0x3F);
                    i += 3;
                }
                _ => return (0, false),
            }
        } else {
            return (0, false);
        }
        h = h.wrapping_mul(31).wrapping_add(unit);
    }
    (h, true)
}

/// `codec.property_values`: segments are the bytes between 0x02 separators; a segment belongs
/// to the record whose begin is the greatest at or before its start (the last record in begin
/// order when none is); it holds `pattern` (name + 0x01) when it starts with it and is longer.
#[allow(clippy::type_complexity)]
pub fn property_values(blob: &[u8], begins: &[i64], patterns: &[Vec<u8>])
    -> Vec<(Vec<i64>, Vec<i64>)> {
    let n = begins.len();
    let mut out: Vec<(Vec<i64>, Vec<i64>)> =
        patterns.iter().map(|_| (vec![-1i64; n], vec![-1i64; n])).collect();
    if n == 0 {
        return out;
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| begins[i]);          // stable, as numpy's argsort(kind="stable")
    let mut next = 0usize;                       // records in `order` with begin <= seg start
    let mut sep = blob.iter().position(|&b| b == 0x02);
    while let Some(at) = sep {
        let start = at + 1;
        let end = blob.get(start..).and_then(|rest| rest.iter().position(|&b| b == 0x02))
            .map_or(blob.len(), |k| start + k);
        while next < n && begins[order[next]] <= start as i64 {
            next += 1;
        }
        let owner = if next == 0 { order[n - 1] } else { order[next - 1] };
        let segment = blob.get(start..end).unwrap_or(&[]);
        for (k, pattern) in patterns.iter().enumerate() {
            if segment.len() > pattern.len() && segment.starts_with(pattern) {
                out[k].0[owner] = (start + pattern.len()) as i64;
                out[k].1[owner] = end as i64;
            }
        }
        sep = if end < blob.len() { Some(end) } else { None };
    }
    out
}
