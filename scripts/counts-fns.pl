#!/usr/bin/env perl
# The function scanner of scripts/counts.sh: reads the .rs files named on
# standard input and prints one record a function, tab-separated:
#   file  start-line  lines  name  tags
# A function runs from its `fn` line to the line where its braces close
# again (strings, chars and `//` comments stripped before braces are
# counted; a signature ending in `;` is a declaration, not a function).
# Functions nested in another one are reported with it, not alone.
# The tags are the counts' tests of a function's text (impl name, name
# and body), each stated beside its tag below.
use strict;
use warnings;

my $daemon = qr/sip-gate|media-ctl|ringsync/;
# consts bound to a daemon binary anywhere: `const BIN: &str =
# env!("CARGO_BIN_EXE_ringsync")` makes BIN a daemon in that file and
# `served::BIN` one in a file that names the module `served`.
my (%file_const, %mod_const);
my @files = map { chomp; $_ } <STDIN>;
for my $f (@files) {
    open my $fh, '<', $f or next;
    while (<$fh>) {
        if (/const\s+(\w+)\s*:\s*&str\s*=\s*env!\("CARGO_BIN_EXE_($daemon)"\)/) {
            my $c = $1;
            $file_const{$f}{$c} = 1;
            (my $m = $f) =~ s{.*/}{}; $m =~ s{\.rs$}{};
            $mod_const{"${m}::$c"} = 1;
        }
    }
}

sub strip {
    my ($l) = @_;
    $l =~ s/"(?:\\.|[^"\\])*"/""/g;
    $l =~ s/'(?:\\.|[^'\\])'/''/g;
    $l =~ s{//.*}{};
    return $l;
}

sub tags {
    my ($f, $impl, $name, $text, $is_test) = @_;
    my @t;
    my $ctx = "$impl $name\n$text";
    my $names_daemon = $ctx =~ /CARGO_BIN_EXE_($daemon)\b|"($daemon)"|media_ctl|\bGate\w*|\bgate\b/;
    for my $c (keys %{ $file_const{$f} || {} }) { $names_daemon ||= $text =~ /(?<![:\w])$c\b/ }
    for my $c (keys %mod_const) { $names_daemon ||= index($text, $c) >= 0 }
    # a `Command` whose program is not a literal other than a daemon's name
    # (`Command::new("perf")`) nor the running binary itself
    my $command = grep { !/^"(?!(?:$daemon)")/ && !/current_exe/ } ($text =~ /Command::new\(([^)]*\)?)/g);
    push @t, 'test' if $is_test;
    # launcher: starts a daemon of the workspace as a child process (a
    # spawn not followed by `wait_with_output`, which is a CLI run)
    my $runs = $text =~ /\.output\(\)|\.status\(\)|wait_with_output/;
    push @t, 'launcher' if $command && $text =~ /\.spawn\(\)|spawn_\w+\(/ && $text !~ /wait_with_output/ && $names_daemon && $f !~ m{^testbed/src/bins/};
    # cli-runner: runs a daemon's CLI to its end (`.output()`, `.status()`,
    # `wait_with_output`)
    push @t, 'cli-runner' if $command && $runs && $names_daemon && $f !~ m{^testbed/src/bins/};
    # poll: a loop that sleeps until a condition holds or a limit passes
    push @t, 'poll' if $text =~ /\bloop\b|\bwhile\b/ && $text =~ /sleep\(/ && $text =~ /Instant::now|elapsed\(\)|deadline|limit|timeout/i
        && $name =~ /^(wait|poll|until|eventually|retry)/;
    # prometheus-parser: reads a sample from exposition text by itself
    push @t, 'prometheus-parser' if $text =~ /\.lines\(\)/ && $text =~ /f64/ && $text =~ /parse/
        && $text =~ /rsplit_once\(' '\)|split_whitespace\(\)|rsplit\(' '\)|split\(' '\)|strip_prefix|starts_with/
        && $text =~ /metric|series|_total|sipgate_|mediactl_|ringsync_/i && $f ne 'testbed/src/metrics.rs';
    # site-builder: writes a site file's text by hand (a `[site]` header)
    # (a helper, not a test; the config loader's own tests in
    # ringsync/src/config/ and the man page's in xtask excepted)
    push @t, 'site-builder' if $text =~ /\[site\]/ && !$is_test && $f !~ m{^testbed/src/fixture\.rs$|^ringsync/src/config/|^xtask/};
    return join(',', @t);
}

for my $f (@files) {
    open my $fh, '<', $f or next;
    my @lines = <$fh>;
    my $is_test = 0;
    my ($impl, $in, $depth, $opened, $start, $name, $text) = ('', 0, 0, 0, 0, '', '');
    for my $i (0 .. $#lines) {
        my $l = $lines[$i];
        my $s = strip($l);
        if (!$in && $s =~ /^\s*impl\b.*?\b(\w+)\s*(?:<[^{]*)?\{?\s*$/) { $impl = $1 }
        if (!$in && $s =~ /^\s*(?:pub(?:\([\w:]+\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?(?:extern\s+"C"\s+)?fn\s+(\w+)/) {
            ($in, $depth, $opened, $start, $name, $text) = (1, 0, 0, $i + 1, $1, '');
            $is_test = grep { /#\[(?:tokio::)?test\b|#\[test\]/ } @lines[($i >= 4 ? $i - 4 : 0) .. $i];
        }
        next unless $in;
        $text .= $l;
        for my $ch ($s =~ /[{};]/g) {
            if ($ch eq '{') { $depth++; $opened = 1 }
            elsif ($ch eq '}') { $depth-- }
            elsif ($ch eq ';' && !$opened) { $in = 0; last }
        }
        if ($in && $opened && $depth <= 0) {
            my $n = $i + 1 - $start + 1;
            printf "%s\t%d\t%d\t%s\t%s\n", $f, $start, $n, $name, tags($f, $impl, $name, $text, $is_test);
            $in = 0;
        }
    }
}
