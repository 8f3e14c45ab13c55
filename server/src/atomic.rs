//! The one way Parlor replaces a file: a temporary file in the same folder, written and
//! synced, renamed over the old one, then the folder synced. Readers and crashes see the old
//! or the new contents, never a mix.

use std::path::Path;

/// The prefix of the temporary files [`write_atomically`] leaves behind if interrupted
/// (`.<name>.tmp-<random>`), for cleanups.
pub const TMP_MARK: &str = ".tmp-";

pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Writes `dir/name` atomically (creating `dir` when missing).
pub fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{name}{TMP_MARK}{}",
        uuid::Uuid::new_v4().simple()
    ));
    let result = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, dir.join(name))?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_replaced_whole_and_no_temporary_file_is_left() {
        let dir = tempfile::tempdir().unwrap();
        write_atomically(dir.path(), "a.json", b"old").unwrap();
        write_atomically(dir.path(), "a.json", b"new").unwrap();
        assert_eq!(std::fs::read(dir.path().join("a.json")).unwrap(), b"new");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["a.json"]);
        // Into a folder that does not exist yet.
        write_atomically(&dir.path().join("sub"), "b", b"x").unwrap();
        assert!(dir.path().join("sub/b").exists());
    }
}
