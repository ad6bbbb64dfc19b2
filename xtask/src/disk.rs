//! How much disk a directory holds and how much its file system has left, for CI's step lines.

use std::path::Path;
use std::process::Command;

/// `target/ holds 9.7 GiB, 70.1 GiB free on its disk` for `dir`; the free part is left out where
/// `df` cannot tell.
pub fn report(dir: &Path) -> String {
    let name = dir.file_name().unwrap_or_default().to_string_lossy();
    let held = format!("{name}/ holds {}", gib(size(dir)));
    match free(dir) {
        Some(free) => format!("{held}, {} free on its disk", gib(free)),
        None => held,
    }
}

/// The bytes of the files under `dir` (symbolic links not followed; unreadable entries count 0).
fn size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(t) if t.is_dir() => size(&entry.path()),
            Ok(t) if t.is_file() => entry.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

/// The bytes free on the file system holding `dir`, from POSIX `df -Pk`.
fn free(dir: &Path) -> Option<u64> {
    let out = Command::new("df").arg("-Pk").arg(dir).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    parse_df_available(&text)
}

/// The `Available` column (KiB) of `df -Pk`'s one data line, in bytes.
fn parse_df_available(text: &str) -> Option<u64> {
    let line = text.lines().nth(1)?;
    let kib: u64 = line.split_whitespace().nth(3)?.parse().ok()?;
    Some(kib * 1024)
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_available_column_of_posix_df() {
        let text = "Filesystem     1024-blocks     Used Available Capacity Mounted on\n\
                    /dev/vda         263174212 12582912  83886080      14% /\n";
        assert_eq!(parse_df_available(text), Some(83_886_080 * 1024));
        assert_eq!(parse_df_available("Filesystem\n"), None);
    }

    #[test]
    fn counts_the_bytes_of_files_in_nested_directories() {
        let dir = std::env::temp_dir().join(format!("xtask-disk-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        std::fs::write(dir.join("one"), [0u8; 100]).unwrap();
        std::fs::write(dir.join("a/b/two"), [0u8; 28]).unwrap();
        assert_eq!(size(&dir), 128);
        assert!(report(&dir).contains(" holds 0.0 GiB"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
