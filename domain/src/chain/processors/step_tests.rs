//! Stepped cuts: the prefix a request shares with the one before holds for many turns.

use super::*;
use crate::chain::{EstimatedTokens, ModelLimits, TokenCounter};

/// A conversation of `turns` questions and answers, with the system prompt first.
fn conversation(turns: usize) -> Vec<Outgoing> {
    let mut messages = vec![Outgoing::prompt(Message::system("prompt", 0))];
    for t in 0..turns {
        let at = 2 * t;
        messages.push(Outgoing::stored(
            Message::user(format!("question {t} {}", "x".repeat(40)), 0),
            at,
        ));
        messages.push(Outgoing::stored(
            Message::assistant(format!("answer {t} {}", "y".repeat(40)), 0),
            at + 1,
        ));
    }
    messages.push(Outgoing::stored(Message::user("newest", 0), 2 * turns));
    messages
}

fn first_kept(kept: &[Outgoing]) -> Option<usize> {
    kept.iter().find_map(|m| m.stored_at)
}

#[test]
fn step_cut_moves_in_steps_and_keeps_between_window_minus_step_and_window() {
    assert_eq!(step_cut(30, 40, 20), 0, "within the window");
    assert_eq!(step_cut(41, 40, 20), 20);
    assert_eq!(
        step_cut(60, 40, 20),
        20,
        "held while the window is not exceeded again"
    );
    assert_eq!(step_cut(61, 40, 20), 40);
    assert_eq!(step_cut(41, 40, 0), 1, "no step: exactly at the window");
    assert_eq!(step_cut(100, 5, 50), 96, "a step is held below the window");
    for count in 41..400 {
        let kept = count - step_cut(count, 40, 20);
        assert!((21..=40).contains(&kept), "{count}: kept {kept}");
    }
}

/// How many of `turns` successive requests start where the one before started.
fn held_turns(limits: &ModelLimits, window: usize, processor: &dyn HistoryProcessor) -> usize {
    let ctx = ChainContext {
        model: limits,
        effective_ctx: window,
        tokens: &EstimatedTokens,
        summary: None,
    };
    let starts: Vec<Option<usize>> = (1..200)
        .map(|turns| first_kept(&processor.process(conversation(turns), &ctx).unwrap()))
        .collect();
    starts.windows(2).filter(|w| w[0] == w[1]).count()
}

#[test]
fn a_stepped_window_or_budget_holds_its_cut_where_an_exact_one_moves_every_turn() {
    let exact = ModelLimits {
        window_step: Some(0),
        budget_step: Some(0),
        ..ModelLimits::default()
    };
    let stepped = ModelLimits {
        window_step: Some(20),
        ..ModelLimits::default()
    };
    // Exact: after the window fills, every turn moves the cut.
    assert!(held_turns(&exact, 40, &SlidingWindow) <= 20);
    // Stepped: it moves once every ten turns (20 messages).
    assert!(held_turns(&stepped, 40, &SlidingWindow) >= 180);
    // The token budget: about 30 tokens a message, a budget of 1200 with a step of 600.
    let budget = ModelLimits {
        token_budget: Some(1200),
        ..exact.clone()
    };
    let budget_stepped = ModelLimits {
        budget_step: Some(600),
        ..budget.clone()
    };
    let held = held_turns(&budget, 40, &TokenBudget);
    assert!(held <= 40, "{held}");
    let held = held_turns(&budget_stepped, 40, &TokenBudget);
    assert!(held >= 150, "{held}");
    // What is sent always fits the budget, and starts on a question.
    let ctx = ChainContext {
        model: &budget_stepped,
        effective_ctx: 40,
        tokens: &EstimatedTokens,
        summary: None,
    };
    for turns in 1..200 {
        let kept = TokenBudget.process(conversation(turns), &ctx).unwrap();
        let tokens: u64 = kept.iter().map(|m| EstimatedTokens.count(&m.message)).sum();
        assert!(tokens <= 1200, "{turns}: {tokens}");
        assert_eq!(kept[1].role(), Role::User);
    }
}

#[test]
fn without_a_step_set_a_window_cuts_a_third_at_a_time() {
    // Neither the model nor `[history]` sets a step: a third of the window (10 of 30).
    let unset = ModelLimits::default();
    assert_eq!(unset.window_step, None);
    let held = held_turns(&unset, 30, &SlidingWindow);
    assert!(
        held >= 150,
        "the cut moves once every five turns: held {held}"
    );
    let ctx = ChainContext {
        model: &unset,
        effective_ctx: 30,
        tokens: &EstimatedTokens,
        summary: None,
    };
    for turns in 15..200 {
        let kept = SlidingWindow.process(conversation(turns), &ctx).unwrap();
        let stored = kept.iter().filter(|m| m.stored_at.is_some()).count();
        // Between the window less its step (starting on a question) and the window.
        assert!((20..=30).contains(&stored), "{turns} turns: kept {stored}");
    }
    // Cut exactly, the same window moves every turn.
    let exact = ModelLimits {
        window_step: Some(0),
        ..ModelLimits::default()
    };
    assert!(held_turns(&exact, 30, &SlidingWindow) <= 20);
}

#[test]
fn the_next_cut_is_foreseen_where_the_next_turn_will_start() {
    // For every length, what `next_start` foresees is where the window starts one turn
    // later (two messages on), whenever that turn cuts; `None` when it holds.
    let (window, step) = (10, 4);
    for turns in 0..30 {
        let now = conversation(turns);
        let later = conversation(turns + 1);
        let start =
            |m: Vec<Outgoing>| first_kept(&SlidingWindow::keep_last_stepped(m, window, step));
        let (cut_now, cut_later) = (start(now.clone()), start(later));
        let foreseen = SlidingWindow::next_start(&now, window, step);
        match cut_later != cut_now {
            true => assert_eq!(foreseen, cut_later, "{turns} turns"),
            false => assert_eq!(foreseen, None, "{turns} turns"),
        }
    }
}
