//! The IndexFile chain check's usual answer, compiled: are the hash slots and chains of a file
//! the regular shape the broker builds, with no link or timeDiff a finding names? When they
//! are not, `mqtool.verify.index._check_index_chains` (the reference) makes the findings.

use std::fs::File;
use std::os::unix::fs::FileExt;

const ENTRY_SIZE: usize = 20;
const CHUNK: usize = 1 << 18;

fn be_i32(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// True when `_check_index_chains` over entries `0..n` (20-byte entries from `entries_start`
/// of `path`) and `slot_values` would add no entry finding: no prev_index out of range or
/// forwards, no negative timeDiff, and (n > 1) every entry reached exactly once, by its slot's
/// head or by one later entry of the same slot, links going strictly backwards. False also when
/// the file cannot be read whole (the reference then reads what there is).
pub fn chains_clean(path: &str, entries_start: u64, n: usize, slot_values: &[i32], count: i64,
                    slots: i64) -> bool {
    if slots <= 0 {
        return false;
    }
    let Ok(file) = File::open(path) else { return false };
    // the entries must be in the file: no allocation from a hostile count
    let Ok(meta) = file.metadata() else { return false };
    let fits = (n as u64).checked_mul(ENTRY_SIZE as u64)
        .and_then(|x| x.checked_add(entries_start))
        .is_some_and(|end| end <= meta.len());
    if !fits {
        return false;
    }
    let mut hashes = vec![0i32; n];
    let mut referenced = vec![false; n];
    let mut raw = vec![0u8; CHUNK.min(n.max(1)) * ENTRY_SIZE];
    let mut lo = 0usize;
    while lo < n {
        let len = CHUNK.min(n - lo);
        let buf = &mut raw[..len * ENTRY_SIZE];
        let Some(at) = (lo as u64).checked_mul(ENTRY_SIZE as u64)
            .and_then(|x| x.checked_add(entries_start)) else { return false };
        if file.read_exact_at(buf, at).is_err() {
            return false;
        }
        for k in 0..len {
            let e = k * ENTRY_SIZE;
            let (Some(h), Some(td), Some(prev)) = (be_i32(buf, e), be_i32(buf, e + 12),
                                                  be_i32(buf, e + 16)) else { return false };
            let number = (lo + k) as i64;
            hashes[lo + k] = h;
            if number < 1 {
                continue;
            }
            let prev = prev as i64;
            if prev < 0 || prev > count || (prev >= number && prev != 0) || td < 0 || h < 0 {
                return false;
            }
            if prev > 0 {
                let target = prev as usize;     // < number: checked above
                if referenced[target] || (hashes[target] as i64) % slots != (h as i64) % slots {
                    return false;
                }
                referenced[target] = true;
            }
        }
        lo += len;
    }
    if n > 1 {
        for (slot, &value) in slot_values.iter().enumerate() {
            if value > 0 && (value as usize) < n {
                let head = value as usize;
                if referenced[head] || (hashes[head] as i64) % slots != slot as i64 {
                    return false;
                }
                referenced[head] = true;
            }
        }
        if !referenced[1..].iter().all(|&r| r) {
            return false;
        }
    }
    true
}

/// The join of sorted record offsets `records` with the offsets `probes` of ConsumeQueue units
/// or index entries (in their own order): for each probe, the record it names (`j`, -1 when
/// none) and where a probe that names none would be inserted after its equals (`after`, the
/// insertion point on the right). With `first_only`, a probe equal to the one before it names
/// none (a duplicate unit is left over, as the broker's merge leaves it).
pub fn join_sorted(records: &[i64], probes: &[i64], first_only: bool) -> (Vec<i64>, Vec<i64>) {
    let mut j = Vec::with_capacity(probes.len());
    let mut after = Vec::with_capacity(probes.len());
    for (k, &p) in probes.iter().enumerate() {
        let left = records.partition_point(|&r| r < p);
        let hit = left < records.len() && records[left] == p
            && !(first_only && k > 0 && probes[k - 1] == p);
        if hit {
            j.push(left as i64);
            after.push(-1);
        } else {
            j.push(-1);
            after.push(records.partition_point(|&r| r <= p) as i64);
        }
    }
    (j, after)
}

/// `join_sorted` of many groups in one call: group `g` joins `records[rstarts[g]..rstarts[g+1]]`
/// with `probes[pstarts[g]..pstarts[g+1]]` (a batch's records of one queue with that queue's
/// units). Answers index `records` as a whole: (j, after), -1 where none. Bounds that are not
/// ordered or run past their arrays are an error (None), never a read outside them.
pub fn join_groups(records: &[i64], rstarts: &[i64], probes: &[i64], pstarts: &[i64],
                   first_only: bool) -> Option<(Vec<i64>, Vec<i64>)> {
    if rstarts.len() != pstarts.len() || rstarts.is_empty() {
        return None;
    }
    let mut j = Vec::with_capacity(probes.len());
    let mut after = Vec::with_capacity(probes.len());
    for g in 0..rstarts.len() - 1 {
        let (r0, r1, p0, p1) = (rstarts[g], rstarts[g + 1], pstarts[g], pstarts[g + 1]);
        if r0 < 0 || r1 < r0 || r1 as u64 > records.len() as u64
            || p0 < 0 || p1 < p0 || p1 as u64 > probes.len() as u64 || p0 as usize != j.len() {
            return None;
        }
        let (rs, ps) = (&records[r0 as usize..r1 as usize], &probes[p0 as usize..p1 as usize]);
        let (gj, gafter) = join_sorted(rs, ps, first_only);
        j.extend(gj.iter().map(|&x| if x >= 0 { x + r0 } else { -1 }));
        after.extend(gafter.iter().map(|&x| if x >= 0 { x + r0 } else { -1 }));
    }
    if j.len() != probes.len() {
        return None;
    }
    Some((j, after))
}
