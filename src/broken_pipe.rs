//! A reader that goes away (`tideway list -w | head -1`, `tideway events | less` quit early)
//! is the normal end of a command's output, not an error. Rust ignores SIGPIPE, so a write to
//! the closed pipe fails, and `println!` turns that into a panic with a backtrace and exit
//! code 101. Every writer is covered in one place instead of at each of the CLI's many
//! prints: a panic whose message is a failed print to a closed pipe ends the process at once
//! with exit code 0 and no text, as other Unix tools end quietly; an error that reaches
//! `main` with a broken pipe in its chain does the same.

use std::any::Any;

/// Installs the panic hook; any other panic goes on to the hook installed before.
pub fn exit_quietly_on_closed_pipe() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if is_closed_pipe_panic(info.payload()) {
            std::process::exit(0);
        }
        previous(info);
    }));
}

/// `println!` and `print!` panic with "failed printing to stdout: Broken pipe (os error 32)".
fn is_closed_pipe_panic(payload: &(dyn Any + Send)) -> bool {
    let text = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or_default();
    text.starts_with("failed printing to") && text.contains("Broken pipe")
}

/// Whether an error ended because the reader of our output went away.
pub fn is_closed_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_failed_print_to_a_closed_pipe_counts() {
        let closed: Box<dyn Any + Send> =
            Box::new("failed printing to stdout: Broken pipe (os error 32)".to_string());
        assert!(is_closed_pipe_panic(closed.as_ref()));
        let other: Box<dyn Any + Send> = Box::new("index out of bounds");
        assert!(!is_closed_pipe_panic(other.as_ref()));
        let io = anyhow::Error::from(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
            .context("writing the list");
        assert!(is_closed_pipe(&io));
        assert!(!is_closed_pipe(&anyhow::anyhow!("no such workload")));
    }
}
