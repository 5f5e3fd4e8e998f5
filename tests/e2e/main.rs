//! End-to-end tests: real `tideway` processes on loopback, numbered so they read in order.
//! Each test takes the harness lock: clusters of three processes on a 2-core machine are
//! not run side by side.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches may panic on a broken setup
#![allow(clippy::disallowed_methods)] // tests wait on real time

mod common;
mod t100_agent_pause_fence;
mod t101_bad_input_timing;
mod t102_tenant_names;
mod t103_body_shapes;
mod t104_readme_recipe;
mod t105_closed_pipe;
mod t106_cli_habits2;
mod t107_peer_log_rate;
mod t108_wan;
mod t10_submit_failover;
mod t110_member_loss_wan;
mod t20_restart;
mod t30_snapshot_catch_up;
mod t40_partition;
mod t41_agent_partition;
mod t42_member_flapping;
mod t50_bad_input;
mod t55_forwarding;
mod t60_cli;
mod t63_policy_rollout;
mod t64_policy_replay;
mod t65_webhooks;
mod t66_dev_notifications_usage;
mod t67_philly_replay;
mod t67_policy_rolebindings;
mod t67_policy_widen;
mod t67_webhook_tidal_rollback;
mod t68_policy_cluster_scope;
mod t70_agents;
mod t80_scheduling;
mod t82_cancel;
mod t83_peer_plane;
mod t84_idempotency_errors;
mod t85_no_write;
mod t86_auth;
mod t87_hardening;
mod t88_rolebindings;
mod t89_jwt;
mod t89_watch;
mod t90_dev_preemption;
mod t90_member_lifecycle;
mod t91_demo;
mod t92_cli_habits;
mod t92_metrics;
mod t93_docs;
mod t93_logs;
mod t94_cli_output;
mod t94_finished_work_leaves_member;
mod t95_dashboard;
mod t95_digest_deltas;
mod t95_node_fault;
mod t96_deploy;
mod t97_member_loss;
mod t97_tidal;
mod t98_checkpoint_report;
mod t98_tidal_audit;
mod t99_chaos;
