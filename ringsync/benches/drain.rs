//! Drain benchmarks (issue 3):
//! 1. the per-request drain decision on a 16-instance site (≤ 200 ns);
//! 2. `DrainView::build` for 1000 instances and 100 profiles (≤ 5 ms).
//!
//! Ring balance (3) is the unit test `ring::tests::ring_balance_100k_keys_4_members`.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use ringsync::config::{Service, SiteConfig};
use ringsync::profile::{Profile, ProfileSet, ProfileState};
use ringsync::view::{DrainView, Health};

/// A site of `servers` servers, each running the services in `per_server`.
fn site(servers: usize, per_server: &[&str]) -> SiteConfig {
    let mut t = String::from("[site]\nname = \"bench\"\n");
    for s in 0..servers {
        t += &format!("[[server]]\nname = \"srv-{s}\"\n");
    }
    for s in 0..servers {
        for (k, svc) in per_server.iter().enumerate() {
            let addr = format!("10.{}.{}.{}:5060", s / 250, s % 250, k + 1);
            let extra = match *svc {
                "sg" | "esg" => format!("sip = \"{addr}\"\n"),
                "mg" | "bgmg" => format!("ng = \"{addr}\"\n"),
                _ => String::new(),
            };
            t += &format!(
                "[[instance]]\nid = \"{svc}-{s}\"\nservice = \"{svc}\"\nserver = \"srv-{s}\"\n{extra}"
            );
        }
    }
    SiteConfig::from_str_at(&t, Path::new("/bench/site.toml")).expect("bench site")
}

fn profiles(n: usize, servers: usize) -> ProfileSet {
    ProfileSet {
        revision: 1,
        profiles: (0..n)
            .map(|i| Profile {
                id: format!("p-{i:08x}"),
                name: format!("profile-{i}"),
                description: String::new(),
                revision: 0,
                servers: (0..3)
                    .map(|k| format!("srv-{}", (i * 7 + k) % servers))
                    .collect(),
                // A tenth active: 30 of 250 servers draining.
                state: if i % 10 == 0 {
                    ProfileState::Active
                } else {
                    ProfileState::Inactive
                },
            })
            .collect(),
    }
}

fn decision(c: &mut Criterion) {
    // 16 instances on 4 servers: sg, esg, mg, bgmg each; srv-0 draining.
    let config = Arc::new(site(4, &["sg", "esg", "mg", "bgmg"]));
    let set = ProfileSet {
        revision: 1,
        profiles: vec![Profile {
            id: "p-1".into(),
            name: "srv-0".into(),
            description: String::new(),
            revision: 0,
            servers: vec!["srv-0".into()],
            state: ProfileState::Active,
        }],
    };
    let view = DrainView::build(config, &set, &[Health::Up; 16], &[None; 16]);
    let call_ids: Vec<String> = (0..1024)
        .map(|i| format!("a84b4c76e66710{i:04x}@pc33.atlanta.example.com"))
        .collect();
    let mut i = 0usize;
    c.bench_function("drain_decision_16_instances", |b| {
        b.iter(|| {
            i = (i + 1) & 1023;
            let idx = i & 15;
            let draining = view.is_draining(black_box(idx));
            let other = view.other_normal_up(black_box(idx));
            let pick = view.pick(&Service::Sg, black_box(call_ids[i].as_bytes()));
            black_box((draining, other, pick))
        })
    });
}

fn build(c: &mut Criterion) {
    // 250 servers × (sg, esg, mg, bgmg) = 1000 instances, 750 in rings.
    let config = Arc::new(site(250, &["sg", "esg", "mg", "bgmg"]));
    assert_eq!(config.instances.len(), 1000);
    let set = profiles(100, 250);
    let health = vec![Health::Up; 1000];
    let work = vec![Some(3); 1000];
    c.bench_function("view_build_1000_instances_100_profiles", |b| {
        b.iter(|| DrainView::build(config.clone(), black_box(&set), &health, &work))
    });
}

criterion_group!(benches, decision, build);
criterion_main!(benches);
