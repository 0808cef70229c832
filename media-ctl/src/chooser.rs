//! The choice of an mg for a new call: a pure function of the pool's state
//! (health, zone, ramp weight, tracked calls) and a little memory of past
//! choices, so every rule is a fast test without a socket.
//!
//! * bgmg first (R-BG-1): a call from an sg/esg goes to the bgmg on its
//!   server, unless that sg/esg is draining (R-BG-3) or the bgmg is down.
//! * Otherwise the mg pool. mgs at full weight form one group that takes
//!   its share by least tracked calls; every mg on a ramp (R-MG-4) takes
//!   exactly its weight's share, by smooth weighted round robin between the
//!   ramping mgs and the full-weight group. A draining mg's share thus
//!   falls with its weight, not with its load: with long calls, "least
//!   loaded over weight" would cut it off at once, a cliff.
//! * R-MG-3: when no mg of the normal zone is up, the draining mgs that are
//!   up stay assignable at full weight (`queued_for_drain`).

/// What the chooser needs to know of one mg or bgmg.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    /// Instance index in the site config.
    pub idx: usize,
    /// Not known to be down.
    pub up: bool,
    /// Its server is in the drain zone.
    pub draining: bool,
    /// Ramp weight in `[0, 1]` (1 for a bgmg).
    pub weight: f64,
    /// Calls tracked on it.
    pub calls: u64,
}

/// Why an mg was chosen (a metrics label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reason {
    /// The bgmg of the sg/esg that sent the offer (R-BG-1).
    Bgmg,
    /// Least tracked calls among the mgs at full weight.
    LeastLoaded,
    /// An mg on a drain or lift ramp, for its weight's share (R-MG-4).
    Ramp,
    /// No normal-zone mg is up: a draining one stays assignable (R-MG-3).
    QueuedForDrain,
}

impl Reason {
    /// The metrics label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Reason::Bgmg => "bgmg",
            Reason::LeastLoaded => "least_loaded",
            Reason::Ramp => "ramp",
            Reason::QueuedForDrain => "queued_for_drain",
        }
    }
}

/// Why the bgmg of the sending sg/esg was passed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BgmgSkip {
    /// The sg/esg is draining: its remaining new calls get a normal-zone mg (R-BG-3).
    LocalDraining,
    /// Every bgmg on its server is down.
    Down,
}

impl BgmgSkip {
    /// The metrics label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            BgmgSkip::LocalDraining => "local_draining",
            BgmgSkip::Down => "bgmg_down",
        }
    }
}

/// The chosen instance and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Choice {
    /// Instance index.
    pub mg: usize,
    /// Why.
    pub reason: Reason,
    /// Set when the sender has a bgmg that was not used.
    pub skipped: Option<BgmgSkip>,
}

/// No instance can take the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NoMg {
    /// The site has no mg (and the sender no usable bgmg).
    #[error("no media gateway is configured")]
    NoneConfigured,
    /// Every mg is down.
    #[error("no media gateway is up")]
    AllDown,
}

impl NoMg {
    /// The metrics label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            NoMg::NoneConfigured => "no_mg_configured",
            NoMg::AllDown => "no_mg_up",
        }
    }
}

/// The sender's own server, when the offer came from a known sg/esg.
#[derive(Debug, Clone, PartialEq)]
pub struct Local {
    /// The sg/esg of that server is draining.
    pub draining: bool,
    /// The bgmg instances on that server.
    pub bgmgs: Vec<Candidate>,
}

/// Memory of past choices: smooth weighted round robin state and how many
/// new calls each instance got.
#[derive(Debug, Clone, Default)]
pub(crate) struct Chooser {
    current: Vec<f64>,
    steady: f64,
    assigned: Vec<u64>,
}

impl Chooser {
    /// Picks the instance for a new call.
    pub(crate) fn choose(
        &mut self,
        local: Option<&Local>,
        pool: &[Candidate],
    ) -> Result<Choice, NoMg> {
        let mut skipped = None;
        if let Some(l) = local.filter(|l| !l.bgmgs.is_empty()) {
            if l.draining {
                skipped = Some(BgmgSkip::LocalDraining);
            } else if let Some(b) = least_loaded(l.bgmgs.iter().filter(|b| b.up), &self.assigned) {
                self.count(b);
                return Ok(Choice {
                    mg: b,
                    reason: Reason::Bgmg,
                    skipped: None,
                });
            } else {
                skipped = Some(BgmgSkip::Down);
            }
        }
        let (mg, reason) = self.choose_mg(pool)?;
        self.count(mg);
        Ok(Choice {
            mg,
            reason,
            skipped,
        })
    }

    /// New calls given to instance `idx` so far.
    pub(crate) fn assigned(&self, idx: usize) -> u64 {
        self.assigned.get(idx).copied().unwrap_or(0)
    }

    fn choose_mg(&mut self, pool: &[Candidate]) -> Result<(usize, Reason), NoMg> {
        if pool.is_empty() {
            return Err(NoMg::NoneConfigured);
        }
        let up = || pool.iter().filter(|c| c.up);
        if !up().any(|c| !c.draining) {
            // R-MG-3 (and R-AA-4): nothing in the normal zone is up.
            return least_loaded(up(), &self.assigned)
                .map(|i| (i, Reason::QueuedForDrain))
                .ok_or(NoMg::AllDown);
        }
        let steady: Vec<&Candidate> = up().filter(|c| c.weight >= 1.0).collect();
        let ramping: Vec<&Candidate> = up().filter(|c| c.weight > 0.0 && c.weight < 1.0).collect();
        let total = steady.len() as f64 + ramping.iter().map(|c| c.weight).sum::<f64>();
        if total <= 0.0 {
            // Only at the instant a lift starts from zero: the normal zone serves.
            let normal = up().filter(|c| !c.draining);
            return least_loaded(normal, &self.assigned)
                .map(|i| (i, Reason::LeastLoaded))
                .ok_or(NoMg::AllDown);
        }
        // Smooth weighted round robin over the ramping mgs and the group.
        let n = pool.iter().map(|c| c.idx + 1).max().unwrap_or(0);
        if self.current.len() < n {
            self.current.resize(n, 0.0);
        }
        let mut best: Option<(f64, Option<usize>)> = None;
        if !steady.is_empty() {
            self.steady += steady.len() as f64;
            best = Some((self.steady, None));
        } else {
            self.steady = 0.0;
        }
        let in_ramp = |i: usize| ramping.iter().any(|c| c.idx == i);
        for (i, cur) in self.current.iter_mut().enumerate() {
            if !in_ramp(i) {
                *cur = 0.0;
            }
        }
        for c in &ramping {
            self.current[c.idx] += c.weight;
            let v = self.current[c.idx];
            if best.is_none_or(|(b, _)| v > b) {
                best = Some((v, Some(c.idx)));
            }
        }
        match best {
            Some((_, Some(i))) => {
                self.current[i] -= total;
                Ok((i, Reason::Ramp))
            }
            _ => {
                self.steady -= total;
                let i = least_loaded(steady.into_iter(), &self.assigned).ok_or(NoMg::AllDown)?;
                Ok((i, Reason::LeastLoaded))
            }
        }
    }

    fn count(&mut self, idx: usize) {
        if self.assigned.len() <= idx {
            self.assigned.resize(idx + 1, 0);
        }
        self.assigned[idx] += 1;
    }
}

/// Fewest tracked calls; ties go to the one given fewer new calls so far
/// (round robin among idle mgs), then to the lower index.
fn least_loaded<'a>(cands: impl Iterator<Item = &'a Candidate>, assigned: &[u64]) -> Option<usize> {
    cands
        .min_by_key(|c| (c.calls, assigned.get(c.idx).copied().unwrap_or(0), c.idx))
        .map(|c| c.idx)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mg(idx: usize, calls: u64) -> Candidate {
        Candidate {
            idx,
            up: true,
            draining: false,
            weight: 1.0,
            calls,
        }
    }

    fn draining(idx: usize, weight: f64, calls: u64) -> Candidate {
        Candidate {
            draining: true,
            weight,
            ..mg(idx, calls)
        }
    }

    fn down(c: Candidate) -> Candidate {
        Candidate { up: false, ..c }
    }

    /// Runs `n` new calls (each kept: its mg's count goes up) and returns
    /// how many each instance got.
    fn run(ch: &mut Chooser, pool: &mut [Candidate], n: usize) -> Vec<u64> {
        let mut got = vec![0; pool.iter().map(|c| c.idx + 1).max().unwrap_or(0)];
        for _ in 0..n {
            let c = ch.choose(None, pool).unwrap();
            got[c.mg] += 1;
            pool.iter_mut().find(|p| p.idx == c.mg).unwrap().calls += 1;
        }
        got
    }

    #[test]
    fn new_calls_go_to_the_least_loaded() {
        let mut ch = Chooser::default();
        let c = ch.choose(None, &[mg(0, 5), mg(1, 2), mg(2, 9)]).unwrap();
        assert_eq!((c.mg, c.reason), (1, Reason::LeastLoaded));
        // Equal loads (short calls, all ended): round robin, not all on one.
        let pool = [mg(0, 0), mg(1, 0), mg(2, 0)];
        let picks: Vec<usize> = (0..6).map(|_| ch.choose(None, &pool).unwrap().mg).collect();
        let mut counts = [0; 3];
        picks.iter().for_each(|&p| counts[p] += 1);
        assert!(counts.iter().all(|&c| c >= 1), "{picks:?}");
        let mut pool = [mg(0, 100), mg(1, 0), mg(2, 50)];
        let got = run(&mut ch, &mut pool, 150);
        assert_eq!(got, vec![0, 100, 50], "levels the load");
    }

    #[test]
    fn r_mg_4_a_ramping_mg_gets_exactly_its_weights_share() {
        // Against two full-weight mgs, the draining mg at weight w < 1 gets
        // w / (w + 2) of new calls whatever its load (here far below the
        // others': least-loaded would give it everything). At weight 1 the
        // drain has not begun to shed: it is one of three equals.
        for (w, expect) in [(1.0, 100), (0.5, 60), (0.25, 33), (0.0, 0)] {
            let mut ch = Chooser::default();
            let pool = [draining(0, w, 0), mg(1, 0), mg(2, 0)];
            let mut got = 0;
            for _ in 0..300 {
                if ch.choose(None, &pool).unwrap().mg == 0 {
                    got += 1;
                }
            }
            // 300 * w/(w+2), exact to one call with SWRR.
            assert!(
                (got as i64 - expect).abs() <= 1,
                "w={w}: {got} (want {expect})"
            );
        }
    }

    #[test]
    fn r_mg_4_a_returning_mg_does_not_take_every_new_call() {
        // Lifted, at weight 0.2, with no calls: least-loaded alone would
        // send it everything; the ramp gives it 0.2/2.2 of them.
        let mut ch = Chooser::default();
        let mut pool = [
            Candidate {
                weight: 0.2,
                ..mg(0, 0)
            },
            mg(1, 500),
            mg(2, 500),
        ];
        let got = run(&mut ch, &mut pool, 110);
        assert_eq!(got[0], 10, "{got:?}");
    }

    #[test]
    fn r_mg_3_the_last_mg_up_stays_assignable() {
        let mut ch = Chooser::default();
        // The only other mg is down: the draining one (even at weight 0) takes the call.
        let c = ch
            .choose(None, &[draining(0, 0.0, 10), down(mg(1, 0))])
            .unwrap();
        assert_eq!((c.mg, c.reason), (0, Reason::QueuedForDrain));
        // Every mg draining: the least loaded of them.
        let c = ch
            .choose(None, &[draining(0, 0.0, 10), draining(1, 0.0, 3)])
            .unwrap();
        assert_eq!((c.mg, c.reason), (1, Reason::QueuedForDrain));
        // One normal mg up: the drained one gets nothing.
        let mut pool = [draining(0, 0.0, 0), down(mg(1, 0)), mg(2, 50)];
        assert_eq!(run(&mut ch, &mut pool, 20), vec![0, 0, 20]);
        // All down: an error, not a guess.
        assert_eq!(
            ch.choose(None, &[down(mg(0, 0)), down(draining(1, 1.0, 0))]),
            Err(NoMg::AllDown)
        );
        assert_eq!(ch.choose(None, &[]), Err(NoMg::NoneConfigured));
    }

    #[test]
    fn r_bg_1_r_bg_3_bgmg_pins_and_its_exceptions() {
        let mut ch = Chooser::default();
        let pool = [mg(0, 0), mg(1, 0)];
        let b = |calls| Candidate {
            idx: 5,
            ..mg(5, calls)
        };
        let local = Local {
            draining: false,
            bgmgs: vec![b(1000)],
        };
        // R-BG-1: the bgmg, however loaded and whatever the pool.
        let c = ch.choose(Some(&local), &pool).unwrap();
        assert_eq!((c.mg, c.reason, c.skipped), (5, Reason::Bgmg, None));
        // R-BG-3: the local sg/esg drains: a normal-zone mg instead.
        let l = Local {
            draining: true,
            ..local.clone()
        };
        let c = ch.choose(Some(&l), &pool).unwrap();
        assert!(c.mg < 2);
        assert_eq!(c.skipped, Some(BgmgSkip::LocalDraining));
        // The bgmg is down: the pool, and the reason is recorded.
        let l = Local {
            draining: false,
            bgmgs: vec![down(b(0))],
        };
        let c = ch.choose(Some(&l), &pool).unwrap();
        assert_eq!(c.skipped, Some(BgmgSkip::Down));
        // A server without bgmg: plainly the pool.
        let l = Local {
            draining: false,
            bgmgs: vec![],
        };
        assert_eq!(ch.choose(Some(&l), &pool).unwrap().skipped, None);
        assert_eq!(ch.assigned(5), 1);
    }
}
