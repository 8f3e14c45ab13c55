//! `!` commands typed in the chat. A message starting with `!` that is not one of these is an
//! ordinary message and goes to the model.

/// A recognised command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// `!model <name>` switches the session's model; `!model` alone lists the models.
    Model(Option<String>),
    /// `!reset` clears the conversation (with a backup where the store keeps them).
    Reset,
    /// `!help` lists the commands.
    Help,
    /// `!summary` shows the conversation's rolling summary and what it covers.
    Summary,
    /// `!compact` brings the rolling summary up to date now.
    Compact,
    /// `!maxctx <n> [temp]` (admin): the agent-wide window ceiling.
    MaxCtx { value: usize, temporary: bool },
    /// `!maxusers <n>` (admin): live sessions allowed; 0 means no limit.
    MaxUsers(usize),
    /// `!sessiontimeout <minutes>` (admin): idle minutes before a session is reaped; 0 never.
    SessionTimeout(u64),
}

impl Command {
    /// Whether the command changes server-wide settings (and needs the admin token).
    pub fn is_admin(&self) -> bool {
        matches!(
            self,
            Command::MaxCtx { .. } | Command::MaxUsers(_) | Command::SessionTimeout(_)
        )
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// Not a command: send it to the model.
    Message,
    Command(Command),
    /// A command with wrong arguments.
    Invalid(Usage),
}

/// How to use a command given wrong arguments (Parlor answers with it).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Usage(pub String);

pub const HELP: &str = "Commands:\n\
    !model <name> — switch this conversation's model (!model alone lists them)\n\
    !reset — clear this conversation and its summary (a backup is kept where the store keeps backups)\n\
    !summary — show the rolling summary of what is no longer sent, and what it covers\n\
    !compact — bring the rolling summary up to date now\n\
    !help — this list\n\
    Administrators (with the admin token):\n\
    !maxctx <n> [temp] — the agent-wide window ceiling, in messages (n ≥ 1)\n\
    !maxusers <n> — live sessions allowed (0 = no limit)\n\
    !sessiontimeout <minutes> — idle minutes before a session is reaped (0 = never)\n\
    Add temp to !maxctx to change it until the next restart only.";

pub fn parse_command(text: &str) -> Parsed {
    let Some(rest) = text.trim().strip_prefix('!') else {
        return Parsed::Message;
    };
    if rest.starts_with(char::is_whitespace) {
        return Parsed::Message;
    }
    let mut words = rest.split_whitespace();
    let Some(name) = words.next() else {
        return Parsed::Message;
    };
    let args: Vec<&str> = words.collect();
    let usage = |u: &str| Parsed::Invalid(Usage(format!("Usage: {u}")));
    let number = |s: &str| s.parse::<i64>().ok();
    match name {
        "model" => match args.as_slice() {
            [] => Parsed::Command(Command::Model(None)),
            [name] => Parsed::Command(Command::Model(Some((*name).to_owned()))),
            _ => usage("!model <name>"),
        },
        "reset" if args.is_empty() => Parsed::Command(Command::Reset),
        "reset" => usage("!reset"),
        "summary" if args.is_empty() => Parsed::Command(Command::Summary),
        "summary" => usage("!summary"),
        "compact" if args.is_empty() => Parsed::Command(Command::Compact),
        "compact" => usage("!compact"),
        "help" => Parsed::Command(Command::Help),
        "maxctx" => match args.as_slice() {
            [n] | [n, "temp"] => match number(n) {
                Some(value) if value >= 1 => Parsed::Command(Command::MaxCtx {
                    value: value as usize,
                    temporary: args.len() == 2,
                }),
                _ => usage("!maxctx <n> [temp], n at least 1"),
            },
            _ => usage("!maxctx <n> [temp], n at least 1"),
        },
        "maxusers" => match args
            .as_slice()
            .first()
            .filter(|_| args.len() == 1)
            .and_then(|n| number(n))
        {
            Some(n) if n >= 0 => Parsed::Command(Command::MaxUsers(n as usize)),
            _ => usage("!maxusers <n>, n at least 0 (0 = no limit)"),
        },
        "sessiontimeout" => match args
            .as_slice()
            .first()
            .filter(|_| args.len() == 1)
            .and_then(|n| number(n))
        {
            Some(n) if n >= 0 => Parsed::Command(Command::SessionTimeout(n as u64)),
            _ => usage("!sessiontimeout <minutes>, at least 0 (0 = never)"),
        },
        _ => Parsed::Message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_commands_and_leaves_everything_else_to_the_model() {
        assert_eq!(
            parse_command("!model gpt-4o"),
            Parsed::Command(Command::Model(Some("gpt-4o".into())))
        );
        assert_eq!(
            parse_command("  !model  "),
            Parsed::Command(Command::Model(None))
        );
        assert_eq!(parse_command("!reset"), Parsed::Command(Command::Reset));
        assert_eq!(parse_command("!help"), Parsed::Command(Command::Help));
        assert_eq!(
            parse_command("!maxctx 50 temp"),
            Parsed::Command(Command::MaxCtx {
                value: 50,
                temporary: true
            })
        );
        assert_eq!(
            parse_command("!maxusers 0"),
            Parsed::Command(Command::MaxUsers(0))
        );
        assert_eq!(
            parse_command("!sessiontimeout 15"),
            Parsed::Command(Command::SessionTimeout(15))
        );
        for text in [
            "!important: read this",
            "!",
            "! model x",
            "hello !model x",
            "!!model",
        ] {
            assert_eq!(parse_command(text), Parsed::Message, "{text}");
        }
        for text in [
            "!maxctx 0",
            "!maxctx -3",
            "!maxctx x",
            "!maxctx 5 forever",
            "!maxusers -1",
            "!sessiontimeout",
            "!model a b",
            "!reset now",
        ] {
            assert!(matches!(parse_command(text), Parsed::Invalid(_)), "{text}");
        }
        assert!(Command::MaxUsers(1).is_admin() && !Command::Reset.is_admin());
    }
}
