//! The book's page on the init's options (docs/reference/init-cli.md) is its `--help`, checked
//! in; `SNAPSHOTS=overwrite cargo test -p hookvisor-init --test init cli_reference` rewrites it.

use std::process::Command;

use snapbox::Assert;

#[test]
fn the_init_cli_reference_is_its_help() {
    let output = Command::new(env!("CARGO_BIN_EXE_hookvisor-init"))
        .arg("--help")
        .env_clear()
        .output()
        .unwrap();
    assert!(output.status.success());
    let page = format!(
        "# Command line: hookvisor-init\n\n\
         <!-- Generated from the binary's --help by crates/hookvisor-init/tests/init/\
         cli_reference.rs; do not edit. -->\n\n\
         The container's PID 1 (see [the container](../guide/container.md)), as its `--help` \
         prints it.\n\n```text\n{}\n```\n",
        String::from_utf8(output.stdout).unwrap().trim_end()
    );
    Assert::new().action_env("SNAPSHOTS").eq(
        page,
        snapbox::file!["../../../../docs/reference/init-cli.md"],
    );
}
