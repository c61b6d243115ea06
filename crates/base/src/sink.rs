//! The one seam for finished records: every source (the bench runner, the proxy's tap,
//! `plan`'s virtual driver, a records file read back) hands each finished
//! [`RequestRecord`] to sinks through [`RecordSink`], so nothing needs a `Vec` of them all.

use crate::RequestRecord;

/// Takes finished records one at a time, in the order the source finished them.
pub trait RecordSink {
    /// Takes one finished record. A sink keeps what it needs of it, never the record.
    fn accept(&mut self, record: &RequestRecord);
}

/// Every sink in the set takes every record, in the set's order.
impl RecordSink for [&mut dyn RecordSink] {
    fn accept(&mut self, record: &RequestRecord) {
        for sink in self.iter_mut() {
            sink.accept(record);
        }
    }
}

impl<F: FnMut(&RequestRecord)> RecordSink for F {
    fn accept(&mut self, record: &RequestRecord) {
        self(record);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Outcome;

    fn rec(index: u64) -> RequestRecord {
        RequestRecord::new(index, Outcome::Succeeded)
    }

    #[test]
    fn a_set_of_sinks_gives_every_record_to_each_in_order() {
        let mut seen_a = Vec::new();
        let mut seen_b = 0u64;
        {
            let mut a = |r: &RequestRecord| seen_a.push(r.index);
            let mut b = |r: &RequestRecord| seen_b += r.index;
            let set: &mut [&mut dyn RecordSink] = &mut [&mut a, &mut b];
            for i in [3, 1, 2] {
                set.accept(&rec(i));
            }
        }
        assert_eq!(seen_a, vec![3, 1, 2]);
        assert_eq!(seen_b, 6);
    }
}
