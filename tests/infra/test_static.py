"""Offline static checks of the deploy artifacts (python-hcl2, no terraform needed).

* every .tf file parses; every variable is documented, typed and used;
* every module resource is reachable from the example (unconditional, or gated
  only by variables the example passes to the module);
* no IAM statement grants a wildcard action on a "*" resource, and the object
  permissions are limited to the bucket prefix;
* the bucket blocks public access, is encrypted, owner-enforced, unversioned,
  with the orphan-safety lifecycle rules;
* the agent's FLOE_* environment (module locals, Dockerfile ENV) names only
  real AgentConfig fields, and docs/operations.md documents every field;
* the Dockerfile runs as non-root with a /healthz HEALTHCHECK and the ports.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.infra.tf import (
    EXAMPLE_DIR,
    MODULE_DIR,
    REPO_ROOT,
    TF_ROOT,
    TfDir,
    load_tf,
    text_of,
    var_refs,
    vars_behind,
)

pytestmark = pytest.mark.infra

TF_FILES = sorted(p for p in TF_ROOT.rglob("*.tf") if ".terraform" not in p.parts)
# FLOE_* names the module sets although AgentConfig has no such field yet. Each
# entry must say why; the test fails once the field exists, so that whoever adds
# it checks that the module's value has the format the agent expects.
PENDING_AGENT_FIELDS: dict[str, str] = {}
# FLOE_* names the CLI itself reads (floe_cli/main.py), not AgentConfig: how many
# agent processes `floe agent` starts (each reads the rest of the environment).
CLI_ENV_NAMES = {"FLOE_WORKERS"}


@pytest.fixture(scope="module")
def module() -> TfDir:
    return TfDir.load(MODULE_DIR)


@pytest.fixture(scope="module")
def example() -> TfDir:
    return TfDir.load(EXAMPLE_DIR)


def agent_config_env_names() -> set[str]:
    from agent.config import AgentConfig

    prefix = AgentConfig.model_config.get("env_prefix", "FLOE_")
    return {f"{prefix}{name}".upper() for name in AgentConfig.model_fields}


# -- parsing and variables --------------------------------------------------------------


def test_tree_has_module_and_example() -> None:
    assert (MODULE_DIR / "variables.tf").is_file()
    assert (MODULE_DIR / "outputs.tf").is_file()
    assert (EXAMPLE_DIR / "main.tf").is_file()
    assert (MODULE_DIR / "tests" / "floe.tftest.hcl").is_file()
    assert len(TF_FILES) >= 10


@pytest.mark.parametrize("path", TF_FILES, ids=lambda p: str(p.relative_to(TF_ROOT)))
def test_every_tf_file_parses(path: Path) -> None:
    doc = load_tf(path)
    assert doc, f"{path} parsed to nothing"


@pytest.mark.parametrize("which", ["module", "example"])
def test_variables_are_described_typed_and_used(which: str, request: pytest.FixtureRequest) -> None:
    d: TfDir = request.getfixturevalue(which)
    variables = d.variables()
    assert variables
    problems = []
    for name, body in variables.items():
        if len(str(body.get("description", "")).strip()) < 10:
            problems.append(f"var.{name}: no description")
        if "type" not in body:
            problems.append(f"var.{name}: no type")
    # Uses outside the variable blocks themselves (their validations name them).
    used: set[str] = set()
    for doc in d.files.values():
        for kind, blocks in doc.items():
            if kind != "variable":
                used |= var_refs(blocks)
    problems += [f"var.{name}: never used" for name in sorted(set(variables) - used)]
    problems += [f"var.{name}: used but not declared" for name in sorted(used - set(variables))]
    assert not problems, "\n".join(problems)


def test_outputs_are_described(module: TfDir, example: TfDir) -> None:
    for d in (module, example):
        for b in d.blocks("output"):
            for name, body in b.items():
                assert str(body.get("description", "")).strip(), (
                    f"output {name} in {d.path} has no description"
                )
    outputs = {name for b in module.blocks("output") for name in b}
    assert {"bootstrap_servers", "bucket_name", "metastore_dsn_secret_arn"} <= outputs


def test_provider_constraint(module: TfDir, example: TfDir) -> None:
    for d in (module, example):
        req = [t["required_providers"] for t in d.blocks("terraform") if "required_providers" in t]
        assert req, f"{d.path}: no required_providers"
        aws = req[0][0]["aws"] if isinstance(req[0], list) else req[0]["aws"]
        assert aws["source"] == "hashicorp/aws"
        assert "~> 5.0" in aws["version"], aws["version"]


# -- reachability from the example --------------------------------------------------------


def example_module_call(example: TfDir) -> dict[str, Any]:
    calls = {name: body for b in example.blocks("module") for name, body in b.items()}
    assert "floe" in calls, 'the example must call the module as module "floe"'
    call = calls["floe"]
    assert call["source"] == "../../modules/floe"
    return call


def test_example_sets_every_required_module_variable(module: TfDir, example: TfDir) -> None:
    call = example_module_call(example)
    required = {name for name, body in module.variables().items() if "default" not in body}
    assert required, "the module should have required inputs (vpc, subnets, image, ...)"
    missing = required - set(call)
    assert not missing, f"the example does not set required module variables: {sorted(missing)}"
    unknown = set(call) - set(module.variables()) - {"source", "version", "providers", "depends_on"}
    assert not unknown, f"the example passes unknown module variables: {sorted(unknown)}"


def test_every_module_resource_is_reachable_from_the_example(module: TfDir, example: TfDir) -> None:
    """A count/for_each gate may only depend on variables the example passes in."""
    call = example_module_call(example)
    locals_ = module.locals()
    problems = []
    resources = module.resources()
    assert len(resources) > 40
    for address, body in resources.items():
        for meta in ("count", "for_each"):
            if meta in body:
                gates = vars_behind(body[meta], locals_)
                not_set = sorted(gates - set(call))
                if not_set:
                    problems.append(
                        f"{address}.{meta} depends on {not_set}, which the example does not set"
                    )
    assert not problems, "\n".join(problems)


# -- IAM ----------------------------------------------------------------------------------


def iam_statements(module: TfDir) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for address, body in module.resources().items():
        if not address.startswith("data.aws_iam_policy_document."):
            continue
        for st in body.get("statement", []):
            out.append((address, st))
        for dyn in body.get("dynamic", []):
            for st in dyn.get("statement", {}).get("content", []):
                out.append((address, st))
    return out


def test_policies_come_from_policy_documents(module: TfDir) -> None:
    """Every inline/bucket/assume-role policy is an aws_iam_policy_document (so the
    statement checks below see all of them)."""
    for address, body in module.resources().items():
        for attr in ("policy", "assume_role_policy"):
            if attr in body:
                assert re.fullmatch(
                    r"\$\{data\.aws_iam_policy_document\.[a-z_]+\.json\}", body[attr]
                ), f"{address}.{attr} must be data.aws_iam_policy_document.<name>.json"
    assert not re.search(r"jsonencode\(\s*\{\s*\"?Version", module.text()), (
        "no hand-written JSON policies"
    )


def test_no_wildcard_action_on_wildcard_resource(module: TfDir) -> None:
    statements = iam_statements(module)
    assert len(statements) >= 8
    for address, st in statements:
        actions = st.get("actions", [])
        resources = st.get("resources", [])
        wild_action = any(a == "*" or a.endswith(":*") for a in actions)
        assert not (wild_action and "*" in resources), (
            f"{address} {st.get('sid')}: {actions} on '*'"
        )
        assert "not_actions" not in st and "not_resources" not in st, (
            f"{address}: no NotAction/NotResource"
        )
        if "*" in resources:  # only actions without resource-level permissions
            assert actions == ["ecr:GetAuthorizationToken"], (
                f"{address} {st.get('sid')}: {actions} on '*'"
            )


def test_object_access_is_limited_to_the_prefix(module: TfDir) -> None:
    doc = module.resources()["data.aws_iam_policy_document.objects"]
    by_sid = {st["sid"]: st for st in doc["statement"]}
    rw = by_sid["ObjectsUnderPrefix"]
    assert sorted(rw["actions"]) == ["s3:DeleteObject", "s3:GetObject", "s3:PutObject"]
    assert rw["resources"] == ["${aws_s3_bucket.objects.arn}/${local.object_prefix}/*"]
    ls = by_sid["ListPrefixOnly"]
    assert ls["actions"] == ["s3:ListBucket"]
    assert ls["resources"] == ["${aws_s3_bucket.objects.arn}"]
    (cond,) = ls["condition"]
    assert (cond["test"], cond["variable"], cond["values"]) == (
        "StringLike",
        "s3:prefix",
        ["${local.object_prefix}/*"],
    )
    res = module.resources()
    assert (
        res["aws_iam_role_policy.agent_objects"]["policy"]
        == "${data.aws_iam_policy_document.objects.json}"
    )
    assert res["aws_iam_role_policy.agent_objects"]["role"] == "${aws_iam_role.agent.id}"
    # The agent task role has no other policy.
    attached = [a for a, b in res.items() if b.get("role") == "${aws_iam_role.agent.id}"]
    assert attached == ["aws_iam_role_policy.agent_objects"]
    assert not any(a.startswith("aws_iam_role_policy_attachment.") for a in res), (
        "no managed policies"
    )


def test_journal_access_is_create_session_on_the_journal_buckets(module: TfDir) -> None:
    """S3 Express authorises object requests through CreateSession's token: the task
    roles get that one action, on the journal's directory buckets only, and only
    when there is a journal."""
    doc = module.resources()["data.aws_iam_policy_document.objects"]
    (dyn,) = [
        d["statement"]
        for d in doc["dynamic"]
        if d["statement"]["content"][0].get("sid") == "JournalSessions"
    ]
    assert dyn["for_each"] == '${local.journal_enabled ? ["journal"] : []}'
    (st,) = dyn["content"]
    assert st["actions"] == ["s3express:CreateSession"]
    assert (
        st["resources"]
        == "${[for zone in var.journal_zones : aws_s3_directory_bucket.journal[zone].arn]}"
    )
    assert (
        module.resources()["aws_s3_directory_bucket.journal"]["for_each"]
        == "${toset(var.journal_zones)}"
    )


def test_secrets_are_read_only_by_the_execution_role(module: TfDir) -> None:
    doc = module.resources()["data.aws_iam_policy_document.execution"]
    (st,) = [s for s in doc["statement"] if s["sid"] == "ReadInjectedSecrets"]
    assert st["actions"] == ["secretsmanager:GetSecretValue"]
    assert st["resources"] == "${values(local.agent_secrets)}"


# -- bucket -----------------------------------------------------------------------------


def test_bucket_is_private_encrypted_and_unversioned(module: TfDir) -> None:
    res = module.resources()
    pab = res["aws_s3_bucket_public_access_block.objects"]
    for flag in (
        "block_public_acls",
        "block_public_policy",
        "ignore_public_acls",
        "restrict_public_buckets",
    ):
        assert pab[flag] is True, flag
    sse = res["aws_s3_bucket_server_side_encryption_configuration.objects"]["rule"][0]
    algo = sse["apply_server_side_encryption_by_default"][0]["sse_algorithm"]
    assert "AES256" in algo and "aws:kms" in algo and "var.kms_key_arn" in algo
    own = res["aws_s3_bucket_ownership_controls.objects"]["rule"][0]
    assert own["object_ownership"] == "BucketOwnerEnforced"
    ver = res["aws_s3_bucket_versioning.objects"]["versioning_configuration"][0]
    assert ver["status"] == "Disabled"
    assert not any(a.startswith(("aws_s3_bucket_acl.", "aws_s3_bucket_website")) for a in res)
    rules = {r["id"]: r for r in res["aws_s3_bucket_lifecycle_configuration.objects"]["rule"]}
    assert "abort_incomplete_multipart_upload" in rules["abort-incomplete-multipart-uploads"]
    tmp = rules["expire-tmp"]
    assert tmp["filter"][0]["prefix"] == "${local.object_prefix}/tmp/"
    assert "expiration" in tmp
    # TLS only.
    deny = res["data.aws_iam_policy_document.bucket"]["statement"][0]
    assert deny["effect"] == "Deny" and deny["condition"][0]["variable"] == "aws:SecureTransport"


def test_database_is_private_encrypted_and_tuned(module: TfDir) -> None:
    res = module.resources()
    db = res["aws_db_instance.metastore"]
    assert db["storage_encrypted"] is True and db["publicly_accessible"] is False
    assert db["password_wo"] == "${var.db_password}", (
        "the password must be write-only (never in state)"
    )
    cluster = res["aws_rds_cluster.metastore"]
    assert cluster["storage_encrypted"] is True
    assert cluster["master_password_wo"] == "${var.db_password}"
    params = module.locals()["postgres_parameters"]
    assert params["synchronous_commit"]["value"] == "on"
    for p in (
        "autovacuum_vacuum_scale_factor",
        "autovacuum_vacuum_insert_scale_factor",
        "autovacuum_analyze_scale_factor",
    ):
        assert float(params[p]["value"]) <= 0.05, p
    assert module.variables()["db_password"].get("ephemeral") is True
    assert module.variables()["db_password"].get("sensitive") is True


# -- agent environment vs AgentConfig --------------------------------------------------------


def module_agent_env_names(module: TfDir) -> set[str]:
    locals_ = module.locals()
    names = set(locals_["agent_environment"])
    names |= set(re.findall(r"\b(FLOE_[A-Z_]+)\s*=", text_of(locals_["agent_zone_environment"])))
    names |= set(re.findall(r"\b(FLOE_[A-Z_]+)\s*=", text_of(locals_["agent_secrets"])))
    names |= set(re.findall(r"\b(FLOE_[A-Z_]+)\s*=", text_of(locals_["journal_environment"])))
    return names


def test_agent_env_names_are_agent_config_fields(module: TfDir) -> None:
    fields = agent_config_env_names()
    names = module_agent_env_names(module)
    assert {
        "FLOE_ZONE",
        "FLOE_METASTORE",
        "FLOE_OBJECTS",
        "FLOE_ADVERTISED_HOST",
        "FLOE_ADVERTISED_PORT",
        "FLOE_JOURNAL",
        "FLOE_JOURNAL_QUORUM",
    } <= names
    unknown = sorted(names - fields - set(PENDING_AGENT_FIELDS) - CLI_ENV_NAMES)
    assert not unknown, (
        f"the module sets {unknown}, which agent/config.py AgentConfig does not read "
        "(pydantic-settings silently ignores unknown FLOE_* variables)"
    )
    landed = sorted(set(PENDING_AGENT_FIELDS) & fields)
    assert not landed, (
        f"AgentConfig now reads {landed}: check that infra/terraform/modules/floe provides it in the "
        "format the agent expects, then remove it from PENDING_AGENT_FIELDS in tests/infra/test_static.py"
    )


def test_task_definitions_use_the_environment_locals(module: TfDir) -> None:
    res = module.resources()
    agent = res["aws_ecs_task_definition.agent"]
    assert agent["for_each"] == "${toset(local.zones)}"
    cdef = agent["container_definitions"]
    assert "environment = local.agent_environment_lists[each.key]" in cdef
    assert "secrets = local.agent_secret_list" in cdef
    assert 'command = ["agent"]' in cdef
    svc = res["aws_ecs_service.agent"]
    assert svc["network_configuration"][0]["subnets"] == ["${var.agent_subnets[each.key]}"]
    compactor = res["aws_ecs_task_definition.compactor"]["container_definitions"]
    assert (
        'command = ["compactor", "run", "--metrics-port", tostring(local.compactor_metrics_port)]'
        in compactor
    )
    assert (
        "environment = [for k, v in merge(local.compactor_environment, local.journal_environment)"
        in compactor
    )
    lists = module.locals()["agent_environment_lists"]
    assert (
        "merge(local.agent_environment, local.journal_environment, local.agent_zone_environment[zone])"
        in lists
    )
    for name in re.findall(r"\bname = \"(FLOE_[A-Z_]+)\"", compactor):
        assert name in agent_config_env_names(), name


def test_compactor_env_names_are_compactor_config_fields(module: TfDir) -> None:
    """FLOE_COMPACTOR_* the module sets are CompactorConfig fields (pydantic-settings
    ignores unknown ones silently); FLOE_OBJECTS/FLOE_METASTORE are the CLI's."""
    from compactor.config import CompactorConfig

    fields = {f"FLOE_COMPACTOR_{name.upper()}" for name in CompactorConfig.model_fields}
    names = set(module.locals()["compactor_environment"])
    assert "FLOE_COMPACTOR_MAX_INPUT_BYTES" in names and "FLOE_OBJECTS" in names
    unknown = sorted(names - fields - {"FLOE_OBJECTS", "FLOE_METASTORE"})
    assert not unknown, (
        f"the module sets {unknown}, which compactor/config.py CompactorConfig does not read"
    )


def test_docs_cover_every_agent_setting() -> None:
    doc = (REPO_ROOT / "docs" / "operations.md").read_text()
    missing = sorted(n for n in agent_config_env_names() if f"`{n}`" not in doc)
    assert not missing, (
        f"docs/operations.md does not document {missing} (table 'Agent configuration')"
    )


# -- Dockerfile -----------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (REPO_ROOT / "Dockerfile").read_text()
    text = re.sub(r"\\\n", " ", text)  # line continuations
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def final_stage() -> list[tuple[str, str]]:
    ins = dockerfile_instructions()
    last_from = max(i for i, (op, _) in enumerate(ins) if op == "FROM")
    return ins[last_from:]


def test_dockerfile_base_user_ports_entrypoint(module: TfDir) -> None:
    ins = dockerfile_instructions()
    froms = [rest for op, rest in ins if op == "FROM"]
    assert all(f.split()[0] == "python:3.11-slim" for f in froms), froms
    stage = final_stage()
    users = [rest for op, rest in stage if op == "USER"]
    assert users, "the runtime stage must switch to a non-root USER"
    assert users[-1].split(":")[0] not in ("root", "0"), users[-1]
    exposed = {p for op, rest in stage if op == "EXPOSE" for p in rest.split()}
    defaults = {name: body.get("default") for name, body in module.variables().items()}
    assert {str(defaults["kafka_port"]), str(defaults["admin_port"])} <= exposed, exposed
    health = [rest for op, rest in stage if op == "HEALTHCHECK"]
    assert len(health) == 1 and "/healthz" in health[0] and "urllib" in health[0], health
    assert ("ENTRYPOINT", '["floe"]') in stage
    assert ("CMD", '["agent"]') in stage


def test_dockerfile_env_matches_agent_config_and_module(module: TfDir) -> None:
    env: dict[str, str] = {}
    for op, rest in final_stage():
        if op == "ENV":
            env.update(dict(re.findall(r"(\w+)=(\S+)", rest)))
    floe = {k: v for k, v in env.items() if k.startswith("FLOE_")}
    assert set(floe) <= agent_config_env_names(), sorted(set(floe) - agent_config_env_names())
    defaults = {name: body.get("default") for name, body in module.variables().items()}
    assert floe["FLOE_PORT"] == str(defaults["kafka_port"])
    assert floe["FLOE_ADMIN_PORT"] == str(defaults["admin_port"])
    health = " ".join(r for op, r in final_stage() if op == "HEALTHCHECK")
    assert "FLOE_ADMIN_PORT" in health, "the HEALTHCHECK must follow FLOE_ADMIN_PORT"


def test_dockerfile_copies_every_package_the_cli_needs() -> None:
    copied = {
        rest.split()[0]
        for op, rest in dockerfile_instructions()
        if op == "COPY" and "--from" not in rest
    }
    ignored = {line.strip() for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()}
    assert not (copied & ignored), f".dockerignore excludes copied paths: {copied & ignored}"
    assert {
        "kafka_protocol",
        "objectstore",
        "metastore",
        "agent",
        "compactor",
        "floe_cli",
    } <= copied
    # Top-level packages imported anywhere under the copied packages must be copied too.
    ours = {
        "kafka_protocol",
        "objectstore",
        "metastore",
        "agent",
        "compactor",
        "floe_cli",
        "spark_source",
        "loadtest",
    }
    needed: set[str] = set()
    for pkg in copied & ours:
        for py in (REPO_ROOT / pkg).rglob("*.py"):
            for m in re.finditer(r"^\s*(?:from|import)\s+([a-z_]+)", py.read_text(), re.M):
                if m.group(1) in ours:
                    needed.add(m.group(1))
    assert needed <= copied, f"the image lacks packages the CLI imports: {sorted(needed - copied)}"


def test_agent_user_matches_the_image(module: TfDir) -> None:
    """The TLS volume is handed to local.agent_uid and the agent container runs as
    local.agent_user: both must be the image's USER, or the agent cannot write it."""
    users = [rest for op, rest in final_stage() if op == "USER"]
    locals_ = module.locals()
    assert locals_["agent_user"] == "${local.agent_uid}:${local.agent_uid}", locals_["agent_user"]
    assert users[-1] == f"{locals_['agent_uid']}:{locals_['agent_uid']}", (
        users,
        locals_["agent_uid"],
    )
