//! Promises a gate breaks on purpose (`testbed chaos --break`), written
//! into its site file, to see the invariants catch them.

/// A promise a gate breaks on purpose, to see the checks catch it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Break {
    /// Reads the profiles under another etcd prefix, so it never sees a
    /// drain and registers where `ringsync status` does not look (etcd
    /// sites only).
    BlindGate,
    /// Lets one new dialog a second from one source through
    /// (`[overload] per_source_rate = 1`) and answers the rest 503 while
    /// every instance could take them.
    RefusingGate,
    /// Every gate (not only the one named) forgets a call one second after
    /// its last request (`[work] max_call_age_s = 1`), so the gates report
    /// no work for calls that are still up.
    ForgetfulGates,
}

impl Break {
    /// Every break, by its `--break` name.
    pub const ALL: [(&'static str, Break); 3] = [
        ("blind-gate", Break::BlindGate),
        ("refusing-gate", Break::RefusingGate),
        ("forgetful-gates", Break::ForgetfulGates),
    ];

    /// Its `--break` name.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, b)| *b == self)
            .map_or("", |(n, _)| n)
    }

    /// The gate's site file, broken.
    pub(crate) fn apply(self, text: String) -> String {
        match self {
            Break::BlindGate => text.replace("\"/drain/rehearsal\"", "\"/drain/rehearsal-blind\""),
            Break::RefusingGate if !text.contains("[overload]") => {
                text + "\n[overload]\nper_source_rate = 1\nper_source_burst = 1\n"
            }
            Break::RefusingGate => text,
            Break::ForgetfulGates => match text.find("max_call_age_s = ") {
                Some(a) => {
                    let end = text[a..].find('\n').map_or(text.len(), |e| a + e);
                    let mut t = text;
                    t.replace_range(a..end, "max_call_age_s = 1");
                    t
                }
                None => text + "\n[work]\nmax_call_age_s = 1\n",
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_break_writes_its_gate_file() {
        let site = "[store]\nprefix = \"/drain/rehearsal\"\n\n[work]\nmax_call_age_s = 60\nmax_expires_s = 10\n";
        let blind = Break::BlindGate.apply(site.into());
        assert!(blind.contains("\"/drain/rehearsal-blind\""), "{blind}");
        let refusing = Break::RefusingGate.apply(site.into());
        assert!(refusing.ends_with("[overload]\nper_source_rate = 1\nper_source_burst = 1\n"));
        let forgetful = Break::ForgetfulGates.apply(site.into());
        assert!(
            forgetful.contains("[work]\nmax_call_age_s = 1\nmax_expires_s = 10\n"),
            "{forgetful}"
        );
        for (name, b) in Break::ALL {
            assert_eq!(b.name(), name);
        }
    }
}
