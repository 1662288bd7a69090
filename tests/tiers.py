"""The two test tiers, defined once: what ``make test`` (the fast tier, CI) runs and what only
``make test-full`` runs.

Every test under ``tests/unit/`` runs in both tiers (pure functions and stored real journals: no real
job). Every other test (real torchrun jobs, real namespaces, containers, FUSE mounts, sshd hosts, a
Slurm cluster) belongs to one capability below: it runs in the fast tier if one of the capability's
``fast`` entries names it, else it is one of the capability's full-tier variants and is marked
``full`` at collection (``make test`` deselects ``-m full``). A real test that no capability names is
a collection error, so a new test must be placed here.

The rule: a full-tier test is a variant of a fast-tier one (another backend, another parameter, more
repetitions); every capability has at least one fast entry. ``python -m tests.tiers`` prints the table
that ``tests/README.md`` holds (``tests/unit/test_tiers.py`` checks the two agree).

An entry names a directory (``tests/net/``), a file (``....py``), a test (``...::test_x``, all its
parameters) or one parameter (``...::test_x[p]``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Capability:
    """One thing chaos does, with the real tests that prove it."""

    name: str
    fast: tuple[str, ...]  # entries the fast tier runs
    full: tuple[str, ...] = ()  # entries of its full-tier variants


E2E = "tests/e2e/"

CAPABILITIES: tuple[Capability, ...] = (
    Capability("kill fault, local backend: restore, progress, equivalence (bitwise)",
               (f"{E2E}test_kill.py::test_kill_worker_restores_and_matches_the_reference",),
               (f"{E2E}test_kill.py", f"{E2E}test_verdicts_probe.py", f"{E2E}test_midwrite.py",
                f"{E2E}test_loadable_checker.py", f"{E2E}test_parallel.py", f"{E2E}test_soak.py")),
    Capability("the README's main job: `chaos run` of the default scenario, bad input exit 2",
               (f"{E2E}test_cli.py::test_run_default_scenario_prints_verdicts_and_recovery_time",
                f"{E2E}test_cli.py::test_bad_scenario_exits_2_and_starts_nothing",
                f"{E2E}test_cli.py::test_bad_deadline_override_exits_2_naming_the_flag_and_starts_nothing",
                f"{E2E}test_cli.py::test_list_names_scenarios_faults_and_checks",
                f"{E2E}test_report.py::test_chaos_report_of_a_missing_run_dir_exits_2",
                f"{E2E}test_markup_cli.py::test_validate_list_and_run_print_a_description_path_and_regex_with_markup_as_they_are"),
               (f"{E2E}test_cli.py", f"{E2E}test_report.py", f"{E2E}test_markup_cli.py", f"{E2E}test_user_script.py",
                f"{E2E}test_full_disk.py")),
    Capability("exclusive_saves: one rank writes each snapshot file",
               (f"{E2E}test_verdicts_probe.py::test_one_rank_saving_the_snapshot_passes_exclusive_saves",),
               (f"{E2E}test_verdicts_probe.py", f"{E2E}test_blackbox_writers.py")),
    Capability("an interrupted run (SIGINT) heals and leaves nothing",
               (f"{E2E}test_cli.py::test_interrupting_a_run_heals_and_leaves_no_process[2]",),
               (f"{E2E}test_network_cli.py::test_interrupt_during_a_network_fault_leaves_nothing",
                f"{E2E}test_disk.py::test_interrupting_a_stalled_run_unmounts")),
    Capability("a SIGKILLed runner, then `chaos cleanup` leaves nothing",
               (f"{E2E}test_cleanup.py::test_sigkill_during_a_disk_stall_then_cleanup_leaves_nothing",),
               (f"{E2E}test_cleanup.py",)),
    Capability("a time limit on every test: a hung run fails within it and leaves nothing",
               (f"{E2E}test_time_limit.py",)),
    Capability("pause fault and no_hang (a peer times out, the job resumes)",
               (f"{E2E}test_nodes.py::test_paused_rank_makes_its_peer_time_out_not_hang",),
               (f"{E2E}test_nodes.py::test_no_collective_timeout_is_a_hang_naming_the_stuck_rank",)),
    Capability("node-crash and node-restart, netns backend: regrouped 3 -> 2 -> 3",
               (f"{E2E}test_nodes.py::test_node_crash_then_a_node_restart_fault_regroups_3_2_3",),
               (f"{E2E}test_nodes.py",)),
    Capability("network faults on a real job: delay, loss, bandwidth (step_time, equivalence)",
               (f"{E2E}test_network_job.py",),
               (f"{E2E}test_network_cli.py", f"{E2E}test_docker_faults.py")),
    Capability("network mechanisms: tc, iptables, the NFQUEUE delayer, measured in namespaces",
               ("tests/net/",
                f"{E2E}test_network_cli.py::test_netem_asked_on_a_kernel_without_it_is_exit_2_naming_the_fallback",
                f"{E2E}test_network_cli.py::test_netns_without_root_is_exit_2_naming_the_fix",
                f"{E2E}test_network_cli.py::test_doctor_says_which_mechanism_each_fault_uses")),
    Capability("ssh backend (real sshd hosts) with a partition",
               ("tests/ssh/test_lab.py",
                "tests/ssh/test_same_verdicts.py::test_the_same_verdicts_on_ssh_hosts_as_on_netns[partition]",
                "tests/ssh/test_ssh_run.py::test_a_host_that_cannot_run_the_job_is_exit_2_naming_it"),
               ("tests/ssh/",)),
    Capability("docker backend (containers from a local node image) with a network delay",
               (f"{E2E}test_docker_faults.py::test_network_delay_scenario_on_docker_slows_the_job_and_matches_the_reference",
                f"{E2E}test_docker.py::test_preflight_names_a_missing_image_without_pulling",
                f"{E2E}test_docker.py::test_preflight_without_an_engine_names_the_fix",
                f"{E2E}test_network_cli.py::test_docker_without_an_engine_is_exit_2_naming_the_fix"),
               (f"{E2E}test_docker.py", f"{E2E}test_docker_faults.py")),
    Capability("Slurm backend and scheduler faults (drain + requeue, down, slurmd-kill, signal)",
               ("tests/slurm/test_lab.py",
                "tests/slurm/test_slurm_faults.py::test_a_requeued_job_comes_back_on_other_nodes_when_one_was_drained",
                "tests/slurm/test_slurm_faults.py::test_a_node_set_down_is_lost_and_the_elastic_job_regroups_naming_the_cause[srun]",
                "tests/slurm/test_slurm_faults.py::test_slurmd_killed_for_less_than_slurmd_timeout_leaves_the_job_running",
                "tests/slurm/test_slurm_faults.py::test_a_sigterm_to_every_job_step_stops_the_job_and_is_named",
                "tests/slurm/test_slurm_run.py::test_what_the_cluster_cannot_take_is_exit_2_before_anything_is_submitted"),
               ("tests/slurm/",)),
    Capability("disk faults through FUSE on a real job (a stall during an async save)",
               (f"{E2E}test_disk.py::test_disk_stall_with_async_save_keeps_stepping",),
               (f"{E2E}test_disk.py", f"{E2E}test_loadable_windows.py")),
    Capability("the disk filesystem's mechanisms (stall, slow, EIO, ENOSPC, write holds, unmount)",
               ("tests/disk/",)),
    Capability("checkpoint damage: the job rejects the damaged newest and falls back (durability checks)",
               (f"{E2E}test_checkpoints.py::test_corrupted_newest_checkpoint_is_rejected_and_the_job_falls_back",),
               (f"{E2E}test_checkpoints.py",)),
    Capability("SDC in a gradient (nan), caught by the probe's detectors",
               (f"{E2E}test_sdc.py::test_nan_in_a_local_gradient_is_caught_by_every_rank_in_that_step",
                f"{E2E}test_sdc.py::test_in_process_faults_need_a_rank_and_a_step"),
               (f"{E2E}test_sdc.py",)),
    Capability("SDC in a parameter: detected, rolled back, recovered; replicas agree",
               (f"{E2E}test_sdc.py::test_persistent_and_parameter_corruption_are_detected_and_recovered[sdc-param-bitflip]",),
               (f"{E2E}test_sdc.py", f"{E2E}test_replicas.py")),
    Capability("device faults through the probe on CPU: gpu-slow (the slowed rank's compute_ms), gpu-hang and "
               "gil-hang (the peer times out, the job resumes), comm-abort (restart and restore)",
               (f"{E2E}test_device_faults.py::test_gpu_slow_raises_the_slowed_ranks_compute_ms_by_its_delay",),
               (f"{E2E}test_device_faults.py",)),
    Capability("straggler check (a slowed rank named with its slowdown; the job's own detection judged) and no_hang's "
               "flight recorder (the stuck collective named), on CPU",
               (f"{E2E}test_straggler.py::test_a_slowed_rank_is_named_with_its_slowdown_and_the_jobs_detection_that_named_it_is_ok",),
               (f"{E2E}test_straggler.py",)),
    Capability("the bundled target's --device/--backend without CUDA: NCCL or CUDA refused at once, naming the fix",
               (f"{E2E}test_devices.py::test_nccl_without_cuda_is_refused_at_once_naming_the_fix",),
               (f"{E2E}test_devices.py",)),
    Capability("GPU (CUDA; skipped without one, CI included): the probe's digests of CUDA tensors",
               ("tests/gpu/test_cuda_digest.py",)),
    Capability("GPU jobs (--device cuda, gloo and NCCL): bitwise resume, NCCL watchdog, digest, straggler, comm-abort",
               ("tests/gpu/test_gpu_jobs.py::test_killed_cuda_job_resumes_bitwise_equal_to_its_reference[gloo-cuda-2]",),
               ("tests/gpu/test_gpu_jobs.py",)),
    Capability("stack: FSDP2 + DCP (async save), killed and resumed bitwise",
               (f"{E2E}test_fsdp2.py::test_fsdp2_rank_killed_at_step_25_resumes_from_step_20_bitwise[async]",),
               (f"{E2E}test_fsdp2.py", f"{E2E}test_dcp.py")),
    Capability("stack: Lightning (ChaosCallback), killed and resumed bitwise",
               (f"{E2E}test_lightning.py::test_killed_lightning_job_resumes_mid_epoch_from_last_ckpt_bitwise_equal",),
               (f"{E2E}test_lightning.py",)),
    Capability("stack: Accelerate (save_state/load_state hooks), killed and resumed",
               (f"{E2E}test_accelerate.py::test_accelerate_job_killed_resumes_with_load_state_and_every_state_directory_verifies",),
               (f"{E2E}test_accelerate.py",)),
    Capability("stack: torchft replica groups (a group cut off from the Lighthouse; a crashed group heals)",
               (f"{E2E}test_torchft.py::test_group_cut_off_from_the_lighthouse_is_dropped_from_the_quorum_then_rejoins",
                f"{E2E}test_torchft.py::test_crashed_replica_group_heals_from_its_peer_while_the_other_trains_on"),
               (f"{E2E}test_torchft.py",)),
    Capability("fault: delay of one torchft replica group (NFQUEUE delayer on the group's cgroup, local backend)",
               (f"{E2E}test_torchft.py::test_delayed_group_slows_its_peer_without_a_restart_or_a_quorum_change",)),
    Capability("a user's own CI: the GitHub Actions and GitLab CI templates and the example test they run",
               (f"{E2E}test_ci_templates.py",)),
    Capability("black-box target (an unchanged script: log lines, exit codes, checkpoint files)",
               (f"{E2E}test_blackbox.py::test_atomic_tutorial_resumes_after_a_kill_on_its_log_line_and_says_what_it_cannot_tell",
                f"{E2E}test_blackbox.py::test_bad_black_box_config_exits_2_naming_the_field_and_the_fix"),
               (f"{E2E}test_blackbox.py", f"{E2E}test_blackbox_shapes.py", f"{E2E}test_blackbox_writers.py")),
    Capability("black-box verdicts at the logs' resolution (print cadence, resume lines, counts)",
               (f"{E2E}test_blackbox_cadence.py::test_restore_is_judged_at_the_logs_resolution"
                "[k10-done-noline-correct-between_saves]",
                f"{E2E}test_blackbox_cadence.py::test_restore_is_judged_at_the_logs_resolution"
                "[k10-done-noline-skip-between_saves]"),
               (f"{E2E}test_blackbox_cadence.py", f"{E2E}test_blackbox_cadence_init.py")),
    Capability("`chaos init` learns a script and its scenario runs",
               (f"{E2E}test_init.py::test_init_learns_the_atomic_tutorial_and_its_scenario_runs_without_a_false_failure",
                f"{E2E}test_init.py::test_init_learns_the_cadence_the_meaning_of_each_number_and_the_resume_line",
                f"{E2E}test_init.py::test_a_bad_command_exits_2_naming_the_fix"),
               (f"{E2E}test_init.py",)),
    Capability("the pytest plugin (marker, options, a failed run's message)",
               ("tests/test_plugin.py::test_options_and_marker_are_registered",
                "tests/test_plugin.py::test_missing_capability_skips_with_reason_and_fails_under_ci",
                "tests/test_plugin.py::test_failed_run_lists_failed_checks_and_the_journal"),
               ("tests/test_plugin.py",)),
    Capability("third-party faults and checks through entry points, in a real job",
               (f"{E2E}test_plugins.py::test_a_plugins_fault_and_check_run_in_a_real_job",),
               (f"{E2E}test_plugins.py",)),
    Capability("explore: a short real search that finds, shrinks and writes a replayable scenario",
               (f"{E2E}test_explore.py::test_a_short_search_finds_shrinks_and_replays",
                f"{E2E}test_explore.py::test_bad_arguments_exit_2_before_any_run"),
               (f"{E2E}test_explore.py",)),
    Capability("the warm launcher: a warm worker sees what a cold one does and is judged the same (explore's runs)",
               (f"{E2E}test_warm.py::test_a_warm_worker_sees_what_a_cold_one_sees_and_is_judged_the_same",),
               (f"{E2E}test_warm.py",)),
    Capability("stored real journals: every check judged ok and failed; re-recorded, they judge the same",
               ("tests/unit/test_stored_journals.py",), (f"{E2E}test_journals_fresh.py",)),
    Capability("`chaos report` on damaged run directories (built from a stored journal): exit 2, never a traceback",
               ("tests/unit/test_report_damaged.py", "tests/fuzz/test_fuzz_cli.py::test_damaged_run_directories")),
    Capability("hardening: another user's files, processes and mounts; loopback only",
               ("tests/security/",)),
    Capability("the generated-input fuzzer of the CLI",
               ("tests/fuzz/",)),
)


def covers(entry: str, nodeid: str) -> bool:
    """Whether a tier ``entry`` names the test ``nodeid`` (see the module's docstring)."""
    if entry.endswith(("/", ".py")):
        return nodeid.startswith(entry if entry.endswith("/") else entry + "::")
    return nodeid == entry or nodeid.startswith(entry + "[")


def tier(nodeid: str) -> str | None:
    """``"unit"``, ``"fast"`` or ``"full"`` for a test; None for a real test no capability names."""
    if nodeid.startswith("tests/unit/"):
        return "unit"
    if any(covers(e, nodeid) for c in CAPABILITIES for e in c.fast):
        return "fast"
    if any(covers(e, nodeid) for c in CAPABILITIES for e in c.full):
        return "full"
    return None


def table() -> str:
    """The markdown table of tests/README.md: capability → fast-tier tests → full-tier variants."""
    def cell(entries: tuple[str, ...]) -> str:
        return "<br>".join(f"`{e.removeprefix('tests/')}`" for e in entries) or "—"

    rows = ["| capability | fast tier (`make test`) | full-tier variants (`make test-full`) |", "|---|---|---|"]
    rows += [f"| {c.name} | {cell(c.fast)} | {cell(c.full)} |" for c in CAPABILITIES]
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(table(), end="")
