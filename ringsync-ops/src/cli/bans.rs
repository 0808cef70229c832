//! `ringsync bans list|lift`: the auth bans a gate holds (R-SEC-3, issue
//! 30), read and lifted on its admin port (`GET /v1/bans`, `DELETE
//! /v1/bans/{ip}`): the one write that port takes, and all it can do is
//! shorten a ban. The gate is named with `--gate`, else the site file's
//! `admin.gate_bind`; ask each gate of a multi-node site in turn (bans are
//! per node).

use std::io::Write;
use std::net::{IpAddr, SocketAddr};

use clap::{Args, Subcommand};
use hyper::Method;

use super::remote::Remote;
use super::CliError;
use ringsync::bans::{BanInfo, BANS_PATH};
use ringsync::config::SiteConfig;

/// `bans` subcommands.
#[derive(Debug, Subcommand)]
pub enum BansCommand {
    /// The bans in force on a gate: listener, source, time left, failures.
    List(GateArg),
    /// Lift every ban of one source on a gate (all its listeners).
    Lift {
        /// The banned source address.
        ip: IpAddr,
        /// The gate.
        #[command(flatten)]
        gate: GateArg,
    },
}

/// Which gate.
#[derive(Debug, Args)]
pub struct GateArg {
    /// The gate's admin address (default: `admin.gate_bind` of the site file).
    #[arg(long, value_name = "ADDR")]
    pub gate: Option<SocketAddr>,
}

impl GateArg {
    fn addr(&self, config: Option<&SiteConfig>) -> Result<SocketAddr, CliError> {
        self.gate
            .or_else(|| config.map(|c| c.admin.gate_bind))
            .ok_or_else(|| {
                CliError::Usage(
                    "bans: give the gate's admin address (--gate ADDR) or --config".into(),
                )
            })
    }
}

pub(super) async fn run(
    config: Option<&SiteConfig>,
    cmd: BansCommand,
    json: bool,
    out: &mut (dyn Write + Send),
) -> Result<(), CliError> {
    match cmd {
        BansCommand::List(gate) => {
            let addr = gate.addr(config)?;
            let gate = Remote::new(&format!("http://{addr}"), None, None)?;
            let bans: Vec<BanInfo> = gate.call(Method::GET, BANS_PATH, None::<&()>).await?;
            if json {
                return super::write_json(out, &bans);
            }
            if bans.is_empty() {
                writeln!(out, "no bans on the gate at {addr}")?;
                return Ok(());
            }
            writeln!(
                out,
                "{:<16} {:<40} {:>9} {:>8}",
                "LISTENER", "SOURCE", "LEFT", "FAILURES"
            )?;
            for b in &bans {
                let left = format!("{}s", b.remaining_s);
                writeln!(
                    out,
                    "{:<16} {:<40} {:>9} {:>8}",
                    b.listener, b.source, left, b.failures
                )?;
            }
            Ok(())
        }
        BansCommand::Lift { ip, gate } => {
            let addr = gate.addr(config)?;
            let gate = Remote::new(&format!("http://{addr}"), None, None)?;
            let path = format!("{BANS_PATH}/{ip}");
            let (status, text) = gate.text(Method::DELETE, &path).await?;
            match status {
                200 => {
                    writeln!(out, "{} (gate {addr})", text.trim())?;
                    Ok(())
                }
                404 if text.contains("not banned") => Err(CliError::Usage(format!(
                    "{ip} is not banned on the gate at {addr}"
                ))),
                // The route exists only where a listener has bans on.
                404 | 405 => Err(CliError::Usage(format!(
                    "the gate at {addr} has no bans to lift (no listener has [listener.auth_ban])"
                ))),
                _ => Err(CliError::Api {
                    status,
                    message: format!("gate {addr}: {}", text.trim()),
                }),
            }
        }
    }
}
