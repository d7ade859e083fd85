//! The merge operator: read-modify-write without a read, as RocksDB's associative merge
//! operator offers it. [`Db::merge`](crate::Db::merge) writes an operand as an entry of its
//! own; reads fold the operands over the newest value (or over nothing) beneath them, and
//! flush and compaction fold them ahead of time where every reader would see the same fold.

/// A user-supplied associative merge.
///
/// `merge(key, existing, operand)` is the value after `operand` is applied to `existing`
/// (`None`: the key has no value). It must be associative: applying `a` and then `b` gives
/// what applying the one operand `merge(key, Some(a), b)` gives, and `merge(key, None, a)`
/// must be `a` folded over nothing. Flush and compaction rely on it to combine operands whose
/// base value lies deeper in the tree. An `Err` fails the read with [`crate::Error::Merge`];
/// flush and compaction keep the entries unfolded instead.
///
/// `merge` runs inside reads, flushes and compactions, and must not call back into the
/// database.
pub trait MergeOperator: Send + Sync {
    /// The value after applying `operand` to `existing`.
    fn merge(&self, key: &[u8], existing: Option<&[u8]>, operand: &[u8])
    -> Result<Vec<u8>, String>;

    /// A name for errors and logs.
    fn name(&self) -> &str;
}

/// A signed 64-bit counter: values and operands are 8 bytes, little-endian; an operand is
/// added (wrapping) to the value, and a key without a value counts from 0.
#[derive(Debug, Default, Clone, Copy)]
pub struct CounterAdd;

impl CounterAdd {
    /// The operand that adds `n`.
    pub fn operand(n: i64) -> [u8; 8] {
        n.to_le_bytes()
    }

    /// The counter a value holds; `None` when it is not 8 bytes.
    pub fn decode(value: &[u8]) -> Option<i64> {
        Some(i64::from_le_bytes(value.try_into().ok()?))
    }
}

impl MergeOperator for CounterAdd {
    fn merge(
        &self,
        _key: &[u8],
        existing: Option<&[u8]>,
        operand: &[u8],
    ) -> Result<Vec<u8>, String> {
        let base = match existing {
            None => 0,
            Some(v) => CounterAdd::decode(v)
                .ok_or_else(|| format!("the value is {} bytes, not a counter's 8", v.len()))?,
        };
        let add = CounterAdd::decode(operand)
            .ok_or_else(|| format!("an operand is {} bytes, not 8", operand.len()))?;
        Ok(base.wrapping_add(add).to_le_bytes().to_vec())
    }

    fn name(&self) -> &str {
        "counter-add"
    }
}

/// Appends each operand to the value, with a delimiter between them (none between nothing
/// and the first).
#[derive(Debug, Default, Clone)]
pub struct Append {
    /// Bytes put between the value and each operand appended to it.
    pub delimiter: Vec<u8>,
}

impl MergeOperator for Append {
    fn merge(
        &self,
        _key: &[u8],
        existing: Option<&[u8]>,
        operand: &[u8],
    ) -> Result<Vec<u8>, String> {
        Ok(match existing {
            None => operand.to_vec(),
            Some(v) => [v, &self.delimiter, operand].concat(),
        })
    }

    fn name(&self) -> &str {
        "append"
    }
}

/// Folds `operands_newest_first` over `base`: the value a read sees.
pub(crate) fn fold<'a>(
    op: Option<&dyn MergeOperator>,
    key: &[u8],
    base: Option<&[u8]>,
    operands_newest_first: impl DoubleEndedIterator<Item = &'a [u8]>,
) -> crate::Result<Vec<u8>> {
    let failed = |reason: String| crate::Error::Merge {
        key: key.to_vec(),
        reason,
    };
    let op = op.ok_or_else(|| {
        failed("the database holds merge operands and no merge operator is set".into())
    })?;
    let mut acc: Option<Vec<u8>> = base.map(<[u8]>::to_vec);
    for operand in operands_newest_first.rev() {
        acc = Some(
            op.merge(key, acc.as_deref(), operand)
                .map_err(|e| failed(format!("{}: {e}", op.name())))?,
        );
    }
    acc.ok_or_else(|| failed("nothing to fold".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_adds_and_refuses_bad_widths() {
        let c = CounterAdd;
        let ops = [CounterAdd::operand(5), CounterAdd::operand(-2)];
        let v = fold(Some(&c), b"k", None, ops.iter().map(|o| &o[..])).unwrap();
        assert_eq!(CounterAdd::decode(&v), Some(3));
        let base = CounterAdd::operand(10);
        let v = fold(Some(&c), b"k", Some(&base), ops.iter().map(|o| &o[..])).unwrap();
        assert_eq!(CounterAdd::decode(&v), Some(13));
        assert!(matches!(
            fold(Some(&c), b"k", Some(b"abc"), ops.iter().map(|o| &o[..])),
            Err(crate::Error::Merge { .. })
        ));
        assert!(fold(None, b"k", None, ops.iter().map(|o| &o[..])).is_err());
    }

    #[test]
    fn append_folds_oldest_first_and_is_associative() {
        let a = Append {
            delimiter: b",".to_vec(),
        };
        // Newest first, as a read meets them.
        let ops: [&[u8]; 3] = [b"c", b"b", b"a"];
        let v = fold(Some(&a), b"k", Some(b"base"), ops.into_iter()).unwrap();
        assert_eq!(v, b"base,a,b,c");
        // Combining the two oldest operands first gives the same.
        let ab = a.merge(b"k", Some(b"a"), b"b").unwrap();
        let combined: [&[u8]; 2] = [b"c", &ab];
        assert_eq!(
            fold(Some(&a), b"k", Some(b"base"), combined.into_iter()).unwrap(),
            v
        );
    }
}
