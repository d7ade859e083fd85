//! Python callables as comparators, as plyvel takes them: `comparator(a, b)` returns a
//! number below, equal to or above zero, under the name `comparator_name`.

use std::cmp::Ordering;
use std::sync::Arc;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

/// A Python callable ordering the keys. The engine calls it from its own threads too
/// (flushes and compactions), taking the GIL for each call: every call into the engine
/// releases the GIL, so no thread waits on the engine while holding it.
pub(crate) struct PyComparator {
    name: String,
    callable: Py<PyAny>,
}

impl strata::Comparator for PyComparator {
    fn name(&self) -> &str {
        &self.name
    }

    /// A raised exception, or a result that does not compare with zero, leaves no order to
    /// go on with: keys already placed by it could not be found again. The exception is
    /// printed and the process aborted, as plyvel does.
    fn compare(&self, a: &[u8], b: &[u8]) -> Ordering {
        let order = Python::try_attach(|py| {
            self.callable
                .call1(py, (PyBytes::new(py, a), PyBytes::new(py, b)))
                .and_then(|r| sign(r.bind(py)))
                .map_err(|e| e.print(py))
        });
        match order {
            Some(Ok(o)) => o,
            Some(Err(())) => fatal(&self.name, "raised an exception"),
            None => fatal(&self.name, "was called after the interpreter shut down"),
        }
    }
}

fn fatal(name: &str, what: &str) -> ! {
    eprintln!(
        "fatal: the comparator {name} {what}; the process stops, since keys cannot be \
         ordered without it"
    );
    std::process::abort()
}

/// The order a comparator's result stands for.
fn sign(result: &Bound<'_, PyAny>) -> PyResult<Ordering> {
    Ok(if result.gt(0)? {
        Ordering::Greater
    } else if result.lt(0)? {
        Ordering::Less
    } else {
        Ordering::Equal
    })
}

/// The comparator of plyvel's `comparator` and `comparator_name` arguments: none without
/// them; both, or neither, must be given, the first callable and the second a byte string
/// (or a string) of UTF-8.
pub(crate) fn from_args(
    comparator: Option<&Bound<'_, PyAny>>,
    comparator_name: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<Arc<dyn strata::Comparator>>> {
    let (callable, name) = match (comparator, comparator_name) {
        (None, None) => return Ok(None),
        (None, Some(_)) => {
            return Err(PyValueError::new_err(
                "comparator_name given without a comparator",
            ));
        }
        (Some(_), None) => {
            return Err(PyValueError::new_err(
                "a comparator needs a comparator_name",
            ));
        }
        (Some(c), Some(n)) => (c, n),
    };
    if !callable.is_callable() {
        return Err(PyTypeError::new_err("the comparator must be callable"));
    }
    let name = if let Ok(s) = name.cast::<PyString>() {
        s.to_str()?.to_string()
    } else if let Ok(b) = name.cast::<PyBytes>() {
        String::from_utf8(b.as_bytes().to_vec())
            .map_err(|_| PyValueError::new_err("comparator_name must be UTF-8"))?
    } else {
        return Err(PyTypeError::new_err(
            "comparator_name must be a byte string",
        ));
    };
    if name.is_empty() {
        return Err(PyValueError::new_err("comparator_name must not be empty"));
    }
    Ok(Some(Arc::new(PyComparator {
        name,
        callable: callable.clone().unbind(),
    })))
}
