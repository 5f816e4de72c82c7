//! Java's String.hashCode of UTF-8 bytes: the TAGS code of ConsumeQueue units and the
//! IndexFile hash of `topic#key`.

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
