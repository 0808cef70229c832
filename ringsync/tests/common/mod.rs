//! Test helpers: a small site in a temporary directory.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use ringsync::SiteConfig;

pub mod etcd;

/// A site file with three servers, sg on each, and its embedded store next to it.
pub const SITE: &str = r#"
[site]
name = "t1"

[store]
kind = "embedded"
path = "t1.profiles.json"

[admin]
bind = "127.0.0.1:0"
gate_bind = "127.0.0.1:9"

[[server]]
name = "srv-a"
[[server]]
name = "srv-b"
[[server]]
name = "srv-c"

[[instance]]
id = "sg-a"
service = "sg"
server = "srv-a"
sip = "127.0.0.1:5001"
[[instance]]
id = "sg-b"
service = "sg"
server = "srv-b"
sip = "127.0.0.1:5002"
[[instance]]
id = "sg-c"
service = "sg"
server = "srv-c"
sip = "127.0.0.1:5003"
[[instance]]
id = "bgmg-a"
service = "bgmg"
server = "srv-a"
ng = "127.0.0.1:6001"
"#;

/// A temp dir holding `site.toml`.
pub struct TestSite {
    pub dir: tempfile::TempDir,
    pub config: Arc<SiteConfig>,
}

impl TestSite {
    pub fn new() -> TestSite {
        Self::with_text(SITE)
    }

    pub fn with_text(text: &str) -> TestSite {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("site.toml");
        std::fs::write(&path, text).unwrap();
        let config = Arc::new(SiteConfig::load(&path).unwrap());
        TestSite { dir, config }
    }

    pub fn site_path(&self) -> PathBuf {
        self.dir.path().join("site.toml")
    }

    pub fn store_path(&self) -> PathBuf {
        self.dir.path().join("t1.profiles.json")
    }
}
