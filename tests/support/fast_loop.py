"""Which tests the fast loop (`pytest -m "not slow"`) leaves to the full run (`pytest`).

The fast loop is what a developer runs after each edit: every rule, endpoint, command and
install path at least once, in seconds. The full run (the README's `pytest`, which CI runs)
runs everything. Besides the `@pytest.mark.slow` marks beside single tests, this table marks
slow, at collection (tests/conftest.py), what costs most and repeats what the fast loop
already holds:

- FILES: a test file whose tests each start something heavy (a `python -m webhook`
  subprocess, TLS servers, helm renders, kustomize builds). `fast` names the tests that stay
  in the fast loop (the rest of the file is slow), or `slow` names the ones that go (the rest
  stays); each entry says why.
- SAMPLED: a parametrized test whose cases multiply (every claim row through the command,
  every exit code of every command in an interpreter ...). Its cases 0, k, 2k, ... in
  collection order stay in the fast loop, the others are slow: a deterministic spread
  that still takes each kind of case at least once where the table says so.

Nothing here leaves the full run; a test named here that no longer exists fails
tests/test_fast_loop.py, so the table cannot rot. A single case named on the command line
(`pytest 'tests/x.py::test_y[case]'`) is case 0 of what was collected, so it runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Part:
    """Which tests of a file the fast loop runs: `fast` (the rest slow) or `slow` (the rest
    fast); neither: the whole file is slow."""

    why: str
    fast: tuple[str, ...] = ()
    slow: tuple[str, ...] = ()

    def is_slow(self, function: str) -> bool:
        if self.slow:
            return function in self.slow
        return function not in self.fast


@dataclass(frozen=True)
class Sample:
    """Cases 0, every, 2*every, ... of a parametrized test stay in the fast loop."""

    every: int
    why: str


FILES: dict[str, Part] = {
    # The server's files.
    "tests/server/test_broken_pipe.py": Part(
        "a `python -m webhook` subprocess per command, a 400-pod output four times: the "
        "commands themselves run in process in tests/tools"
    ),
    "tests/server/test_certificates.py": Part(
        "a TLS server per cipher suite and per rotation; the fast loop keeps one suite agreed, "
        "one refused, TLS 1.3, and a rotation",
        slow=("test_rotation_under_load_drops_no_connection_and_serves_the_new_certificate",),
    ),
    "tests/server/test_client_certificates.py": Part(
        "a TLS server per case, rotations under load; the fast loop keeps a served and a "
        "refused client",
        fast=(
            "test_a_certificate_of_the_ca_with_an_accepted_name_is_served",
            "test_a_connection_without_an_acceptable_certificate_is_refused_before_a_request",
        ),
    ),
    "tests/server/test_limits.py": Part(
        "each fills the server's budget of review bytes over TLS or waits out the body "
        "timeout; the fast loop keeps the body timeout, the bound of one address and the total",
        fast=(
            "test_a_body_that_stops_arriving_is_a_408_and_closes",
            "test_one_address_holds_no_more_than_its_review_bytes_others_go_on",
            "test_beyond_the_review_bytes_in_total_a_large_request_is_a_429_a_small_one_is_not",
            "test_a_budget_lets_each_address_go_in_order_and_others_past_it",
            "test_a_wait_given_up_just_as_room_comes_leaves_the_budget_whole",
            "test_a_wait_given_up_lets_the_later_ones_of_its_address_go_at_once",
            "test_an_address_whose_large_reviews_took_their_share_waits_and_no_other_does",
        ),
    ),
    "tests/server/test_connections.py": Part(
        "a TLS server per case, the header timeout's cases wait it out; the fast loop keeps "
        "one header timeout, the caps, the handshake turns and the adapter's contract",
        slow=(
            "test_a_head_sent_a_byte_at_a_time_does_not_keep_a_connection",
            "test_a_connection_that_sends_nothing_after_its_handshake_is_closed",
            "test_connections_opened_at_once_wait_their_handshake_turn_and_are_all_served",
        ),
    ),
    "tests/server/test_server_contract.py": Part(
        "bodies of 7 MiB and more, and a review that outlasts its timeout, each over TLS",
        slow=(
            "test_a_body_of_exactly_7_mib_is_reviewed",
            "test_a_chunked_body_over_7_mib_is_a_413",
            "test_a_large_review_that_outlasts_the_timeout_is_answered_before_the_deadline",
        ),
    ),
    "tests/server/test_server_reload.py": Part(
        "a certificate rotation under load; the fast loop keeps the policy reload",
        slow=("test_a_rotated_certificate_is_served_to_new_handshakes_with_no_failed_request",),
    ),
    "tests/server/test_fuzz.py": Part("bodies of megabytes around the limit, over TLS"),
    # The installs: each renders the chart (helm template) or builds deploy/ (kubectl
    # kustomize) with settings of its own. The fast loop keeps the default render and build,
    # read by most tests at no further cost, and one test of each kind of value.
    "tests/deploy/test_helm.py": Part(
        "a helm render, `helm lint` or a policy check per case; the one render and policy "
        "check of every case of the chart's policy schema (`judged`)",
        slow=(
            "test_the_chart_refuses_what_the_schema_says_where_policy_check_does",
            "test_the_chart_leaves_the_checks_across_fields_to_policy_check",
            "test_a_file_with_both_kinds_of_problem_gets_the_schemas_from_the_chart",
            "test_the_chart_names_the_file_and_the_field",
            "test_no_scrapers_closes_the_metrics_port",
            "test_the_bootstrap_job_names_the_objects_of_its_release",
            "test_helm_lint_is_clean",
            "test_the_generated_file_and_the_policy_copies_are_current",
            "test_namespaced_objects_live_in_the_release_namespace",
            "test_the_chart_installs_what_deploy_installs",
            "test_a_policy_change_renames_the_configmap_the_deployment_mounts",
            "test_a_file_of_the_same_name_replaces_a_shipped_one",
            "test_the_site_policy_and_the_shipped_ones_pass_the_charts_check",
            "test_values_the_server_converts_or_reads_otherwise_than_helm_are_not_refused",
            "test_a_value_helm_reads_otherwise_is_left_to_the_server",
            "test_a_policy_name_helm_reads_as_true_or_false_must_be_quoted",
            "test_the_bootstrap_job_runs_anew_at_every_upgrade",
            "test_cert_manager_with_an_issuer_of_the_sites",
            "test_certificate_values_the_chart_refuses",
            "test_client_auth_mounts_the_ca_as_a_directory_and_names_it_to_the_server",
            "test_the_variables_client_auth_sets_are_serves_options",
            "test_helm_lint_is_clean_with_client_auth",
            "test_client_auth_values_the_chart_refuses",
            "test_extra_env_cannot_set_the_client_auth_variables",
            "test_the_values_example_installs_what_its_text_says",
            "test_the_chart_refuses_a_capacity_ceiling_outside_the_grammar_as_policy_check_does",
            "test_a_class_name_helm_reads_otherwise_must_be_quoted",
            "test_a_class_one_policy_lists_is_a_gpu_class_of_every_policy_with_a_dra_section",
            "test_the_entries_of_no_policy_in_force_send_the_claims_of_every_gpu_class",
        ),
    ),
    "tests/deploy/test_audit_deploy.py": Part(
        "a helm render, `helm lint` or a kustomize build per case",
        slow=(
            "test_a_cpu_limit_drops_the_checkov_skip_of_it",
            "test_the_audit_is_off_by_default",
            "test_without_network_policies_the_audit_has_none_either",
            "test_the_webhook_namespace_is_the_releases",
            "test_the_namespaces_the_webhook_leaves_out_are_left_out_of_the_audit",
            "test_the_values_reach_the_cronjob",
            "test_the_longest_release_name_still_makes_a_cronjob_name",
            "test_no_network_policy_cuts_the_audit_off_from_the_api_server",
            "test_the_chart_refuses_extra_args_it_sets_itself",
            "test_the_chart_takes_schedules_kubernetes_takes",
            "test_helm_lint_is_clean_with_the_audit",
            "test_the_notes_show_how_to_run_it_and_read_the_reports",
            "test_the_component_adds_the_audit_and_changes_nothing_else",
            "test_the_component_mounts_the_policies_of_the_sites_install",
            "test_the_openreports_component_refuses_to_patch_a_changed_rule",
        ),
    ),
    "tests/deploy/test_deploy.py": Part(
        "a kustomize build of an overlay of its own, or the bootstrap job run on the rights "
        "its role grants",
        slow=(
            "test_the_network_policy_admits_the_prometheus_the_monitoring_docs_name",
            "test_the_monitoring_objects_have_the_operators_shape",
            "test_a_site_kustomization_sets_the_image_as_the_install_guide_shows",
            "test_a_site_overlay_changes_who_may_scrape_as_the_install_guide_shows",
            "test_the_jobs_account_may_create_the_serving_secret_and_no_other",
            "test_the_bootstrap_job_runs_on_exactly_the_rights_it_is_granted",
            "test_the_client_auth_component_stops_without_the_ca_file",
            "test_the_monitoring_overlay_scrapes_the_metrics_port_of_the_service",
            "test_the_site_example_installs_only_the_sites_policies",
            "test_the_site_examples_entries_are_what_render_prints_for_its_policies",
            "test_the_install_guides_monitoring_kustomization_labels_both_objects",
        ),
    ),
    "tests/deploy/test_docs_commands.py": Part(
        "runs every command the docs show, renders and builds of the docs' settings",
        fast=(
            "test_every_timeout_the_docs_quote_is_the_shipped_one",
            "test_the_latency_alert_is_a_tenth_of_the_timeout_the_configurations_set",
        ),
    ),
    "tests/deploy/test_install_site_policies.py": Part(
        "discovers a policy, then renders and builds an install of it"
    ),
    "tests/deploy/test_dashboard.py": Part(
        "a helm render or kustomize build per case; the fast loop keeps the chart's dashboard",
        fast=("test_the_charts_dashboard_is_the_json_file_with_the_sidecars_label",),
    ),
    "tests/deploy/test_quickstart.py": Part(
        "kustomize builds of what the quickstart applies; the fast loop runs its commands",
        slow=("test_the_builds_it_applies_hold_what_it_waits_for",),
    ),
    # The commands' own heavy cases.
    "tests/tools/test_kube_api.py": Part(
        "checks the API server stand-in the audit's tests use (test support, not the "
        "product), each case through the official client on a thread; the fast loop keeps a "
        "paged list and an apply",
        fast=(
            "test_a_list_pages_with_limit_and_continue_at_one_resource_version",
            "test_apply_creates_then_updates_and_an_unchanged_apply_writes_nothing",
        ),
    ),
    "tests/tools/test_exit_codes.py": Part(
        "a `python -m webhook` subprocess per exit code: the same codes of the same main() "
        "are held in process, command by command",
        slow=("test_the_interpreter_exits_with_the_same_codes",),
    ),
    "tests/tools/test_cli.py": Part(
        "the serve command's variables, read with the others'",
        slow=("test_a_bad_variable_of_serve_does_not_disturb_the_others",),
    ),
    "tests/tools/test_audit_reports.py": Part(
        "large reports checked against every copy of their CRD's schema",
        slow=(
            "test_the_large_and_the_claims_reports_are_valid_too",
            "test_a_namespace_too_large_for_one_report_gets_more_never_splitting_an_object",
            "test_the_cluster_report_has_one_result_per_opted_in_namespace",
        ),
    ),
    "tests/tools/test_audit_cluster.py": Part(
        "an API server stand-in over HTTP per case; the fast loop keeps the read, the write "
        "and one way each can fail",
        fast=(
            "test_the_cluster_reads_as_its_dump_does",
            "test_lists_are_paged_and_every_page_is_read",
            "test_a_wrong_token_and_an_unreachable_server_are_one_line",
            "test_reports_are_applied_then_left_alone_then_updated_and_pruned",
        ),
    ),
    "tests/policy/test_workload_kinds.py": Part(
        "a cluster stand-in per kind through the rendered configuration, a render of another "
        "kinds file",
        slow=("test_render_and_mutate_take_another_kinds_file",),
    ),
    "tests/test_layering.py": Part(
        "parses every module of the tests and the benchmarks",
        slow=("test_no_module_of_the_tests_or_the_benchmarks_imports_a_test_module",),
    ),
    # The engine's tests that go through the server or the rendered configuration.
    "tests/engine/test_near_misses.py": Part(
        "a TLS server, and the command through the rendered configuration's conditions",
        slow=(
            "test_the_server_sends_each_near_miss_as_a_warning",
            "test_no_published_manifest_or_example_is_taken_for_a_near_miss",
        ),
    ),
    "tests/engine/test_warnings.py": Part(
        "reviews the API server's largest warnings",
        slow=("test_the_user_is_told_no_more_than_the_api_server_keeps",),
    ),
    "tests/engine/test_dra_claims.py": Part(
        "renders a policy's configuration for its CEL conditions",
        slow=(
            "test_a_claim_of_no_gpu_class_is_never_sent_and_passes",
            "test_the_matchconditions_send_the_gpu_classes_of_the_policy",
            "test_a_class_another_policy_lists_is_a_gpu_class_here",
        ),
    ),
}

SAMPLED: dict[str, dict[str, Sample]] = {
    "tests/engine/test_dra_claims.py": {
        "test_mutate_prints_the_refusal_with_its_rule": Sample(
            12, "every refused claim row through `mutate`; the core judges each row"
        ),
        "test_a_policy_without_dra_refuses_gpu_claims": Sample(3, "a policy set per case"),
        "test_mutate_prints_the_claim_as_admitted": Sample(
            12, "every admitted claim row through `mutate`; the core judges each row"
        ),
        "test_each_documented_object_is_valid": Sample(
            25, "each object of the docs against the API server's schema"
        ),
        "test_each_rows_object_is_one_the_api_server_takes_or_refuses_itself": Sample(
            5, "each row's object against the API server's schema"
        ),
    },
    "tests/engine/test_rules.py": {
        "test_a_workload_whose_pods_would_break_a_rule_is_refused_the_same_way": Sample(
            4, "every rule case in every workload kind; every case as a pod stays, and 4 is "
            "prime to the kinds' count, so each kind still gets its share of the cases"
        ),
    },
    "tests/engine/test_near_misses.py": {
        "test_mutate_prints_each_near_miss_on_stderr": Sample(
            4, "each near miss through `mutate`; the core finds each one in the fast loop"
        ),
    },
    "tests/engine/test_validation_pin.py": {
        "test_the_rendered_chain_with_a_later_webhook_refuses_the_unpinned_pod": Sample(
            5, "each case through the rendered configurations' CEL"
        ),
    },
    "tests/engine/test_view.py": {
        "test_where_the_typed_decode_takes_a_pod_the_reader_finds_nothing_and_reads_it_alike": (
            Sample(2, "the corpus through both decoders")
        ),
    },
    "tests/tools/test_exit_codes.py": {
        "test_each_command_keeps_the_exit_codes": Sample(
            3, "each command's exit codes in process; the cases go command by command"
        ),
    },
    "tests/tools/test_cli.py": {
        "test_a_bad_option_is_exit_2_and_one_line": Sample(3, "every bad option of every command"),
        "test_a_bad_value_in_a_variable_is_exit_2_and_one_line": Sample(
            3, "every bad variable of every command"
        ),
        "test_bad_variables_of_other_commands_do_not_disturb_a_command": Sample(
            3, "each command with the others' bad variables"
        ),
    },
    "tests/tools/test_mutate_cli.py": {
        "test_an_allowed_example_exits_0_and_shows_its_mutation": Sample(
            3, "every allowed example through the rendered configuration and the command"
        ),
        "test_a_denied_example_exits_1_with_the_rule_for_the_pod_and_the_workload": Sample(
            3, "every denied example as a pod and as a workload through the command"
        ),
        "test_a_namespace_the_configurations_leave_out_is_not_reviewed_and_says_why": Sample(
            3, "each namespace the configurations leave out, through their CEL"
        ),
    },
    "tests/tools/test_mutate_dra.py": {
        "test_a_refused_claim_is_a_denied_line_and_exit_1": Sample(
            3, "each refused claim through the command"
        ),
    },
    "tests/tools/test_discover_dra.py": {
        "test_bad_slices_are_one_line_and_exit_2": Sample(3, "each bad slice through the command"),
    },
    "tests/tools/test_policy_check_dra.py": {
        "test_what_the_server_refuses_in_a_dra_section_is_an_error_of_its_file": Sample(
            3, "each bad DRA section through the command"
        ),
        "test_what_a_dra_section_says_that_never_works_is_a_warning": Sample(
            3, "each warning of a DRA section through the command"
        ),
    },
    "tests/tools/test_manifests.py": {
        "test_audit_and_mutate_read_every_stream_kubectl_reads": Sample(
            3, "each stream shape through two commands"
        ),
    },
    "tests/tools/test_explain.py": {
        "test_a_namespace_is_explained_as_the_api_server_and_the_server_route_it": Sample(
            3, "each namespace through the rendered configurations' CEL"
        ),
    },
    "tests/deploy/test_helm.py": {
        "test_policy_values_the_chart_refuses": Sample(3, "a render per refused value"),
        "test_values_the_chart_refuses": Sample(4, "a render per refused value"),
    },
    "tests/deploy/test_audit_deploy.py": {
        "test_the_component_installs_what_the_chart_installs": Sample(
            4, "a helm render and a kustomize build per way to install"
        ),
        "test_on_it_adds_the_audit_objects_and_changes_nothing_else": Sample(
            2, "a helm render per report kind"
        ),
    },
    "tests/tools/test_audit_cluster.py": {
        "test_reports_are_applied_then_left_alone_then_updated_and_pruned": Sample(
            2, "three audit runs against the API server stand-in per report kind"
        ),
    },
    "tests/tools/test_policy_check.py": {
        "test_taints_a_class_does_not_tolerate_keep_its_pods_off_its_nodes": Sample(
            3, "a node file and a check per taint"
        ),
    },
    "tests/policy/test_documents.py": {
        "test_every_reader_says_one_mistake_in_the_same_words": Sample(
            4, "every mistake through every reader; 4 is prime to the readers' count, so "
            "each reader and each mistake still comes through"
        ),
    },
    "tests/tools/test_render.py": {
        "test_every_pod_reaches_the_webhook_where_route_2_is_on_and_only_there": Sample(
            4, "each plain pod through every entry's CEL"
        ),
        "test_a_workload_nothing_can_refuse_never_reaches_the_webhook": Sample(
            10, "every plain spec in every workload kind through every entry's CEL"
        ),
        "test_the_cluster_picks_the_policy_the_offline_mutate_picks": Sample(
            4, "each namespace through the cluster stand-in and the command"
        ),
        "test_a_pod_update_reaches_the_webhook_only_when_it_adds_or_changes_a_cdi_annotation": (
            Sample(6, "each Pod update through every entry's CEL")
        ),
        "test_conditions_evaluate_without_error_on_sparse_objects": Sample(
            5, "each sparse object through every entry's CEL"
        ),
        "test_a_policy_name_yaml_1_1_reads_as_no_string_is_quoted": Sample(5, "a render per name"),
    },
    "tests/policy/test_workload_kinds.py": {
        "test_in_a_cluster_the_validating_webhook_refuses_it_at_apply": Sample(
            3, "a cluster stand-in per kind"
        ),
    },
    "tests/server/test_server_contract.py": {
        "test_a_body_that_is_not_a_usable_review_is_a_400_with_a_one_line_reason": Sample(
            5, "a TLS server per body"
        ),
        "test_a_body_that_is_not_json_by_its_content_type_is_a_415": Sample(
            3, "a TLS server per content type"
        ),
        "test_any_other_second_segment_is_not_found": Sample(3, "a TLS server per path"),
        "test_an_unknown_policy_path_is_denied_with_a_message_that_says_so": Sample(
            2, "a TLS server per path"
        ),
    },
    "tests/server/test_certificates.py": {
        "test_tls_1_3_is_agreed_with_an_aead_suite_and_no_ticket": Sample(
            2, "a TLS server per key type"
        ),
        "test_a_pair_that_cannot_be_served_is_one_line_naming_the_file": Sample(
            3, "a server start per broken pair"
        ),
        "test_each_offered_tls_1_2_suite_is_agreed": Sample(6, "a handshake per suite"),
        "test_tls_1_2_suites_without_ecdhe_or_aead_are_refused": Sample(8, "a handshake per suite"),
        "test_the_refused_suites_clients_work_where_the_server_allows_them": Sample(
            8, "a server that allows the suite, per suite"
        ),
        "test_a_broken_pair_is_refused_and_the_old_certificate_keeps_being_served": Sample(
            4, "a TLS server per broken pair"
        ),
    },
    "tests/server/test_client_certificates.py": {
        "test_a_connection_without_an_acceptable_certificate_is_refused_before_a_request": Sample(
            4, "a TLS server per client"
        ),
    },
}


def slow_items(nodeids: Iterable[str]) -> set[str]:
    """The node ids, of those collected (in collection order), that the table makes slow."""
    seen: dict[tuple[str, str], int] = {}
    slow: set[str] = set()
    for nodeid in nodeids:
        path, _, name = nodeid.partition("::")
        function = name.partition("[")[0]
        part = FILES.get(path)
        if part is not None and part.is_slow(function):
            slow.add(nodeid)
            continue
        sample = SAMPLED.get(path, {}).get(function)
        if sample is not None:
            index = seen.get((path, function), 0)
            seen[path, function] = index + 1
            if index % sample.every:
                slow.add(nodeid)
    return slow


# A module marked slow as a whole.
_MODULE_SLOW = re.compile(r"^pytestmark = pytest\.mark\.slow$", re.MULTILINE)


def wholly_slow(path: str, text: str) -> bool:
    """Whether every test of the file `path` (relative to the checkout, with "/"), whose
    source is `text`, is slow: the table's or its own `pytestmark` says so. The fast loop
    does not import such a file (tests/conftest.py): it would deselect all it collects."""
    part = FILES.get(path)
    if part is not None and not part.fast and not part.slow:
        return True
    return _MODULE_SLOW.search(text) is not None


def named_functions() -> list[tuple[str, str]]:
    """Every (file, function) the table names."""
    named = [(path, f) for path, part in FILES.items() for f in (*part.fast, *part.slow)]
    named += [(path, f) for path, functions in SAMPLED.items() for f in functions]
    return named
