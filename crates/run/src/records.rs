//! A run's records read whole, for what learns from a run's timeline at once (the
//! endpoint's twin): a records file or directory, or another tool's saved run
//! imported first. A saved JSON report holds no chunk times and is refused by name.

use std::path::Path;

use cadence_core::RequestRecord;

use crate::{input, Error, Loaded};

/// The run in `path` loaded (its report, its levels' record ids) and every record of
/// it, in file order.
pub fn read_all(path: &Path) -> Result<(Loaded, Vec<RequestRecord>), Error> {
    // An import's records file lives in `_dir`, read before it goes.
    let (loaded, _dir) = match crate::import::load(path, None, &Default::default())? {
        Some(i) => (i.loaded, Some(i.dir)),
        None => (crate::load(&[path.to_path_buf()], &[], None, None)?, None),
    };
    let Some(src) = &loaded.records else {
        return Err(input(format!(
            "{}: a saved JSON report holds no chunk times; the twin learns from records (cadence bench --records, the proxy's, or an import)",
            path.display()
        )));
    };
    let records = src.read().collect::<Result<Vec<_>, _>>()?;
    Ok((loaded, records))
}
