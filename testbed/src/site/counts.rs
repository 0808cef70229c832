//! A site built from counts (`sg = 3, esg = 2, ...`): testbed writes the
//! site file an operator would, with invented names (`srv-a`, `sg-a`,
//! `ap1-b`, ...); it then goes through the same loader and mapping as an
//! operator's own file ([`super::Layout::from_counts`]).

use std::fmt::Write as _;

use super::layout::{RunSpec, MAX_PER_SERVICE};

/// Counts of a site built by testbed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counts {
    /// sg instances, one per server from `srv-a`.
    pub sg: usize,
    /// esg instances, one per server from `srv-a`.
    pub esg: usize,
    /// mg instances, one per server from `srv-a`.
    pub mg: usize,
    /// A bgmg on every server that has an sg or esg.
    pub bgmg: bool,
    /// Active-Passive groups (`ap-1`, ...): a member on every server, homed
    /// on `srv-a`.
    pub ap_groups: usize,
}

impl Default for Counts {
    fn default() -> Self {
        Counts {
            sg: 2,
            esg: 0,
            mg: 2,
            bgmg: false,
            ap_groups: 0,
        }
    }
}

/// The letter of server `i`: `a`, `b`, ...
fn letter(i: usize) -> char {
    char::from(b'a' + u8::try_from(i % 26).unwrap_or(0))
}

impl Counts {
    /// Checks the counts; the message says which is out of range.
    pub fn check(&self) -> Result<(), String> {
        for (what, n) in [
            ("sg", self.sg),
            ("esg", self.esg),
            ("mg", self.mg),
            ("ap_groups", self.ap_groups),
        ] {
            if n > MAX_PER_SERVICE {
                return Err(format!("{what} = {n}: at most {MAX_PER_SERVICE}"));
            }
        }
        if self.sg + self.esg == 0 {
            return Err("a site needs at least one sg or esg".into());
        }
        if self.ap_groups > 0 && self.servers() < 2 {
            return Err("ap_groups needs at least two servers (a leader and a follower)".into());
        }
        Ok(())
    }

    fn servers(&self) -> usize {
        self.sg.max(self.esg).max(self.mg).max(1)
    }

    /// The site file of these counts. Addresses are the run's own already;
    /// the mapping leaves them where they are.
    pub(super) fn site_text(&self, run: &RunSpec) -> String {
        let mut t = head(run);
        for i in 0..self.servers() {
            let _ = writeln!(t, "[[server]]\nname = \"srv-{}\"", letter(i));
        }
        // Documentation addresses (RFC 5737): the mapping moves them onto
        // the run's loopback like any operator's.
        let mut add = |svc: &str, key: &str, base: usize, n: usize| {
            for i in 0..n {
                let l = letter(i);
                let _ = writeln!(
                    t,
                    "\n[[instance]]\nid = \"{svc}-{l}\"\nservice = \"{svc}\"\nserver = \"srv-{l}\"\n{key} = \"192.0.2.{}:5060\"",
                    base + i
                );
            }
        };
        add("sg", "sip", 20, self.sg);
        add("esg", "sip", 40, self.esg);
        add("mg", "ng", 60, self.mg);
        add(
            "bgmg",
            "ng",
            80,
            if self.bgmg { self.sg.max(self.esg) } else { 0 },
        );
        self.ap_toml(&mut t);
        if self.esg > 0 {
            t.push_str(
                "\n[[account]]\nname = \"rehearsal-carrier\"\nmulti_instance = true\nmatch = { source = [\"192.0.2.200/32\"] }\n\
                 \n[[account]]\nname = \"rehearsal-single\"\nmulti_instance = false\nhome = \"esg-a\"\nmatch = { source = [\"192.0.2.201/32\"] }\n",
            );
        }
        let mut listener = |name: &str, port: u16, pool: &str, leg: &str| {
            let _ = writeln!(
                t,
                "\n[[listener]]\nname = \"{name}\"\nbind = \"192.0.2.250:{port}\"\ntransports = [\"udp\"]\nmode = \"balance\"\npool = \"{pool}\"\nleg = \"{leg}\""
            );
        };
        if self.sg > 0 {
            listener("subscribers", 5060, "sg", "subscriber");
        }
        if self.esg > 0 {
            listener("providers", 5070, "esg", "provider");
            listener("inside", 5080, "esg", "inside");
        }
        t
    }

    fn ap_toml(&self, t: &mut String) {
        for g in 1..=self.ap_groups {
            let ids: Vec<String> = (0..self.servers())
                .map(|i| format!("ap{g}-{}", letter(i)))
                .collect();
            for (i, id) in ids.iter().enumerate() {
                let _ = writeln!(
                    t,
                    "\n[[instance]]\nid = \"{id}\"\nservice = \"ap\"\nserver = \"srv-{}\"",
                    letter(i)
                );
            }
            let quoted: Vec<String> = ids.iter().map(|m| format!("\"{m}\"")).collect();
            let _ = writeln!(
                t,
                "\n[[ap_group]]\nname = \"ap-{g}\"\nmembers = [{}]\nhome = {}",
                quoted.join(", "),
                quoted[0]
            );
        }
    }
}

/// The settings a rehearsal of counts runs with: short probes, short work
/// lives, the run's timers.
fn head(run: &RunSpec) -> String {
    let [a, b, c] = run.net;
    let pace = run.ap_pace_s.unwrap_or(60);
    format!(
        "[site]\nname = \"rehearsal\"\nsecret = \"rehearsal-secret-{a}-{b}-{c}-0123456789\"\n\n\
         [timers]\nretry_after_s = 5\nretry_after_jitter_s = 0\nmg_drain_window_s = {w}\nap_pace_s = {pace}\nap_test_pace_allowed = {test_pace}\n\n\
         [health]\ninterval_ms = 500\ntimeout_ms = 300\nfailures = 2\n\n\
         [work]\nmax_expires_s = 10\nmax_call_age_s = 60\ntypical_call_s = 10\n\n\
         [media]\nping_interval_ms = 500\nping_timeout_ms = 300\nping_failures = 2\n\n",
        w = run.mg_drain_window_s.unwrap_or(10),
        test_pace = pace < 60,
    )
}
