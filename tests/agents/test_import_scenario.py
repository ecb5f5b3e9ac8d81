"""Importing Index Network scenario files: the parser's rules, the service's writes, the command.

The real files ship in ``scenarios/index-network`` (MIT, with their source in SOURCE.md).
"""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import IntegrityError
from django.forms.models import model_to_dict

from agents import configuration
from agents.models import Agent, Intent
from agents.scenarios import ImportResult, ScenarioError, scenario_import, scenario_parse
from parley.models import Membership, Tenant
from tests.conftest import SCENARIOS, make_user

FORMATS = ("intents-only", "with-instructions")


def _scenario_files() -> list[Path]:
    """Every scenario file, or the folder itself so that each file test fails (not skips) without it."""
    return sorted(SCENARIOS.rglob("*.json")) or [SCENARIOS]


def _load(path: Path) -> dict[str, Any]:
    assert path.is_file(), f"no scenario files under {SCENARIOS} (they ship with the repository)"
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


scenario_file = pytest.mark.parametrize(
    "path", _scenario_files(), ids=lambda p: str(p.relative_to(SCENARIOS)) if p != SCENARIOS else "missing"
)


def user(user_id: str, *intent_ids: str, **fields: object) -> dict[str, object]:
    """A valid user dict with one intent per id (default one, "primary"), plus ``fields``."""
    intents = [{"id": i, "intent": f"{user_id} wants {i}"} for i in intent_ids or ("primary",)]
    return {"id": user_id, "name": user_id.title(), "intents": intents, **fields}


def scenario(*users: dict[str, object]) -> dict[str, object]:
    return {"users": list(users) or [user("alice"), user("bob")]}


def accounts_of(tenant: Tenant) -> dict[str, str]:
    """Every member of ``tenant``, ``{username: role}``."""
    return dict(
        Membership.objects.filter(tenant=tenant)
        .values_list("user__username", "role")
        .order_by("user__username")
    )


def rows(tenant: Tenant) -> dict[str, dict[str, Any]]:
    """Every agent of ``tenant`` with its primary key and intents ``{external_id: (pk, statement)}``."""
    return {
        agent.slug: {
            **model_to_dict(agent),
            "pk": agent.pk,
            "intents": {
                i.external_id: (i.pk, i.statement)
                for i in Intent.objects.for_tenant(tenant).filter(agent=agent)
            },
        }
        for agent in Agent.objects.for_tenant(tenant)
    }


# --- the real files ------------------------------------------------------------------------------


def test_the_scenario_folder_holds_both_formats() -> None:
    for folder in FORMATS:
        files = sorted((SCENARIOS / folder).glob("*.json"))
        assert files, f"no scenario files in {SCENARIOS / folder}"
        for path in files:
            has_instructions = {bool(u.get("instructions")) for u in _load(path)["users"]}
            assert has_instructions == {folder == "with-instructions"}, path


@scenario_file
def test_a_real_file_imports_one_agent_per_user_and_one_intent_per_intent(tenant: Tenant, path: Path) -> None:
    data = _load(path)
    users = data["users"]
    intent_count = sum(len(u["intents"]) for u in users)

    result = scenario_import(tenant=tenant, data=data)

    assert result == ImportResult(
        agents_created=len(users),
        agents_updated=0,
        intents_created=intent_count,
        intents_updated=0,
        timezone_fallbacks=(),
        principals_created=tuple(f"acme.{u['id']}" for u in users),
    )
    assert Agent.objects.for_tenant(tenant).count() == len(users)
    assert Intent.objects.for_tenant(tenant).count() == intent_count
    for u in users:
        # The bundled ids are already valid slugs, so they are kept as they are.
        agent = Agent.across_tenants.get(tenant=tenant, slug=u["id"])
        assert agent.name == u["name"]
        assert agent.party_id == f"acme:user:{u['id']}"
        assert agent.system_prompt == u.get("instructions", "")
        assert agent.description == ""
        assert agent.timezone == "UTC"
        assert agent.principal is not None
        assert agent.principal.get_username() == f"acme.{u['id']}"
        statements = dict(
            Intent.objects.for_tenant(tenant).filter(agent=agent).values_list("external_id", "statement")
        )
        assert statements == {i["id"]: i["intent"] for i in u["intents"]}


@scenario_file
def test_importing_a_real_file_again_changes_nothing(tenant: Tenant, path: Path) -> None:
    data = _load(path)
    users = data["users"]
    intent_count = sum(len(u["intents"]) for u in users)
    first, second = StringIO(), StringIO()

    call_command("import_scenario", str(path), "--tenant", "acme", stdout=first)
    before = rows(tenant)
    call_command("import_scenario", str(path), "--tenant", "acme", stdout=second)

    accounts = ", ".join(f"acme.{u['id']}" for u in users)
    assert first.getvalue() == (
        f"Imported {path} into tenant acme: agents created {len(users)}, updated 0; "
        f"intents created {intent_count}, updated 0.\n"
        f"Principals created: {accounts} (principal members with no password and a placeholder "
        "e-mail until they are invited).\n"
    )
    assert second.getvalue() == (
        f"Imported {path} into tenant acme: agents created 0, updated {len(users)}; "
        f"intents created 0, updated {intent_count}.\n"
        f"Principals kept: {len(users)} agents already had one.\n"
    )
    assert rows(tenant) == before
    assert accounts_of(tenant) == {f"acme.{u['id']}": Membership.Role.PRINCIPAL for u in users}


# --- fields, timezones, re-import ---------------------------------------------------------------


def test_profile_fields_land_in_the_prompt_and_description(tenant: Tenant) -> None:
    data = scenario(
        user(
            "alice",
            instructions="Ask me before committing to a schedule.",
            intro="Product designer working on accessible tools",
            location="London, UK",
            timezone="Europe/London",
        ),
        user("bob", intro="Engineer"),
        user("carla", location="Lisbon"),
        user("diego"),
    )

    scenario_import(tenant=tenant, data=data)

    agents = {a.slug: a for a in Agent.objects.for_tenant(tenant)}
    assert agents["alice"].system_prompt == (
        "Ask me before committing to a schedule.\n\n"
        "Intro: Product designer working on accessible tools\n\n"
        "Location: London, UK"
    )
    assert agents["alice"].description == "Product designer working on accessible tools"
    assert agents["bob"].system_prompt == "Intro: Engineer"
    assert agents["bob"].description == "Engineer"
    assert agents["carla"].system_prompt == "Location: Lisbon"
    assert agents["carla"].description == ""
    assert agents["diego"].system_prompt == ""


@pytest.mark.parametrize(
    ("given", "stored", "fallbacks"),
    [
        ({"timezone": "Europe/London"}, "Europe/London", ()),
        ({"timezone": "America/Argentina/Buenos_Aires"}, "America/Argentina/Buenos_Aires", ()),
        ({"timezone": "UTC"}, "UTC", ()),
        ({}, "UTC", ()),
        ({"timezone": ""}, "UTC", ()),
        ({"timezone": "Mars/Olympus"}, "UTC", ("alice",)),
        ({"timezone": "europe/london"}, "UTC", ("alice",)),
        ({"timezone": "Europe"}, "UTC", ("alice",)),
        ({"timezone": "../etc/passwd"}, "UTC", ("alice",)),
        ({"timezone": "/etc/localtime"}, "UTC", ("alice",)),
        ({"timezone": "Europe/" + "x" * 60}, "UTC", ("alice",)),
    ],
)
def test_timezone_is_kept_when_zoneinfo_knows_it_else_utc(
    tenant: Tenant, given: dict[str, object], stored: str, fallbacks: tuple[str, ...]
) -> None:
    result = scenario_import(tenant=tenant, data=scenario(user("alice", **given), user("bob")))

    assert Agent.across_tenants.get(tenant=tenant, slug="alice").timezone == stored
    assert result.timezone_fallbacks == fallbacks


def test_reimport_updates_in_place_and_keeps_what_the_file_no_longer_lists(tenant: Tenant) -> None:
    scenario_import(
        tenant=tenant,
        data=scenario(user("alice", "a1", "a2", timezone="Europe/Paris", intro="Old"), user("bob")),
    )
    before = rows(tenant)
    changed = scenario(
        user(
            "alice",
            name="Alice Morgan",
            intents=[{"id": "a1", "intent": "A new statement"}, {"id": "a3", "intent": "A third thing"}],
        ),
        user("bob"),
    )

    result = scenario_import(tenant=tenant, data=changed)

    assert result == ImportResult(
        agents_created=0,
        agents_updated=2,
        intents_created=1,
        intents_updated=2,
        timezone_fallbacks=(),
        principals_kept=2,
    )
    after = rows(tenant)
    alice = after["alice"]
    assert alice["pk"] == before["alice"]["pk"]
    assert alice["name"] == "Alice Morgan"
    # Fields the file defines follow the file, including ones it dropped.
    assert alice["timezone"] == "UTC"
    assert alice["description"] == ""
    assert alice["system_prompt"] == ""
    assert {k: v[1] for k, v in alice["intents"].items()} == {
        "a1": "A new statement",
        "a2": "alice wants a2",
        "a3": "A third thing",
    }
    assert alice["intents"]["a1"][0] == before["alice"]["intents"]["a1"][0]


def test_fields_the_file_does_not_define_survive_a_reimport(tenant: Tenant) -> None:
    scenario_import(tenant=tenant, data=scenario())
    Agent.across_tenants.filter(tenant=tenant, slug="alice").update(max_turns=3, model="openai:gpt-5")

    scenario_import(tenant=tenant, data=scenario())

    alice = Agent.across_tenants.get(tenant=tenant, slug="alice")
    assert (alice.max_turns, alice.model) == (3, "openai:gpt-5")


def test_user_ids_become_slugs_and_the_party_id_keeps_the_id(tenant: Tenant) -> None:
    data = scenario(user("Alice Morgan", "shared-id"), user("bob_okafor", "shared-id"))

    scenario_import(tenant=tenant, data=data)

    agents = dict(Agent.objects.for_tenant(tenant).values_list("slug", "party_id"))
    assert agents == {"alice-morgan": "acme:user:Alice Morgan", "bob_okafor": "acme:user:bob_okafor"}
    assert Intent.objects.for_tenant(tenant).filter(external_id="shared-id").count() == 2


def test_an_import_never_touches_another_tenants_agents(tenant: Tenant, other_tenant: Tenant) -> None:
    theirs = Agent.objects.create(
        tenant=other_tenant, slug="alice", name="Globex Alice", system_prompt="Globex's own prompt."
    )
    Intent.objects.create(tenant=other_tenant, agent=theirs, statement="Globex work", external_id="primary")
    before = rows(other_tenant)

    scenario_import(tenant=tenant, data=scenario())
    scenario_import(tenant=tenant, data=scenario())

    assert rows(other_tenant) == before
    assert Agent.across_tenants.get(pk=theirs.pk).updated_at == theirs.updated_at
    ours = Agent.across_tenants.get(tenant=tenant, slug="alice")
    assert ours.pk != theirs.pk
    assert ours.party_id == "acme:user:alice"
    assert Intent.objects.for_tenant(tenant).filter(agent=ours).count() == 1


def test_a_failure_midway_writes_nothing(tenant: Tenant, monkeypatch: pytest.MonkeyPatch) -> None:
    data = scenario(user("alice", "a1", "a2"), user("bob", "b1"))
    real = Intent.objects.update_or_create
    calls = 0

    def refuse_the_last(**kwargs: Any) -> tuple[Intent, bool]:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise IntegrityError("simulated refusal")
        return real(**kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(Intent.objects, "update_or_create", refuse_the_last)

    with pytest.raises(IntegrityError):
        scenario_import(tenant=tenant, data=data)

    assert calls == 3
    assert not Agent.objects.for_tenant(tenant).exists()
    assert not Intent.objects.for_tenant(tenant).exists()
    assert accounts_of(tenant) == {}
    assert not User.objects.exists()


# --- principals ---------------------------------------------------------------------------------


def test_each_user_becomes_a_principal_member_who_answers_for_its_agent(tenant: Tenant) -> None:
    """An agent with nobody to ask never asks, so each gets its party as principal: a new account,
    a principal member of the tenant, that cannot sign in until the person is invited."""
    scenario_import(tenant=tenant, data=scenario(user("alice"), user("Bob Okafor")))

    assert accounts_of(tenant) == {"acme.alice": "principal", "acme.bob-okafor": "principal"}
    for slug, username in (("alice", "acme.alice"), ("bob-okafor", "acme.bob-okafor")):
        agent = Agent.across_tenants.get(tenant=tenant, slug=slug)
        account = User.objects.get(username=username)
        assert agent.principal == account
        assert (account.email, account.has_usable_password(), account.is_active) == (
            f"{username}@scenario.invalid",
            False,
            True,
        )
        configuration.full_clean(agent)  # the principal is a member who may answer: the agent validates


def test_a_principal_the_agent_has_is_kept(tenant: Tenant, operator: User) -> None:
    scenario_import(tenant=tenant, data=scenario())
    Agent.across_tenants.filter(tenant=tenant, slug="alice").update(principal=operator)

    result = scenario_import(tenant=tenant, data=scenario())

    assert (result.principals_created, result.principals_matched, result.principals_kept) == ((), (), 2)
    assert Agent.across_tenants.get(tenant=tenant, slug="alice").principal == operator


def test_a_member_of_that_name_is_made_the_principal_and_no_account_is_created(tenant: Tenant) -> None:
    member = make_user("ACME.Alice")
    Membership.objects.create(user=member, tenant=tenant, role=Membership.Role.OPERATOR)

    result = scenario_import(tenant=tenant, data=scenario())

    assert (result.principals_created, result.principals_matched) == (("acme.bob",), ("ACME.Alice",))
    assert Agent.across_tenants.get(tenant=tenant, slug="alice").principal == member
    assert accounts_of(tenant) == {"ACME.Alice": "operator", "acme.bob": "principal"}


@pytest.mark.parametrize(
    ("role", "active", "reason"),
    [
        (None, True, "the username acme.alice is taken by an account that is not a member of acme"),
        (
            Membership.Role.VIEWER,
            True,
            "acme.alice is a viewer of acme, and a viewer cannot answer for an agent",
        ),
        (Membership.Role.PRINCIPAL, False, "acme.alice's account is deactivated"),
    ],
    ids=["not-a-member", "viewer", "deactivated"],
)
def test_an_account_that_cannot_answer_is_not_made_principal_and_the_command_says_why(
    tenant: Tenant, tmp_path: Path, role: str | None, active: bool, reason: str
) -> None:
    """An account of that name outside the tenant may be anyone's: it is never given this tenant."""
    account = make_user("acme.alice")
    account.is_active = active
    account.save(update_fields=["is_active"])
    if role is not None:
        Membership.objects.create(user=account, tenant=tenant, role=role)
    before = accounts_of(tenant)
    err = StringIO()

    call_command(
        "import_scenario", str(write(tmp_path, scenario())), "--tenant", "acme", stdout=StringIO(), stderr=err
    )

    assert err.getvalue() == (
        f"No principal for alice: {reason}. Until it has one, its agent declines where it would ask; "
        "set one on the agent's page.\n"
    )
    assert Agent.across_tenants.get(tenant=tenant, slug="alice").principal is None
    assert accounts_of(tenant) == {**before, "acme.bob": "principal"}


# --- the rules ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([], "top level must be an object, got array"),
        ("users", "top level must be an object, got string"),
        (None, "top level must be an object, got null"),
        ({}, "users is required"),
        ({**scenario(), "meta": {}}, 'top level has unknown key "meta"'),
        ({"users": {}}, "users must be an array, got object"),
        ({"users": []}, "users must hold at least two users, got 0"),
        ({"users": [user("alice")]}, "users must hold at least two users, got 1"),
        ({"users": [user("alice"), "bob"]}, "users[1] must be an object, got string"),
        ({"users": [user("alice"), 7]}, "users[1] must be an object, got number"),
        (scenario(user("alice"), {"name": "Bob", "intents": []}), "users[1].id is required"),
        (scenario(user("alice"), user("bob", id=2)), "users[1].id must be a non-empty string"),
        (scenario(user("alice"), user("bob", id="  ")), "users[1].id must be a non-empty string"),
        (
            scenario(user("alice"), user("bob", id="b" * 432)),
            "users[1].id must be at most 431 characters, got 432",
        ),
        (
            scenario({"id": "alice", "intents": [{"id": "x", "intent": "y"}]}, user("bob")),
            "users[0].name is required",
        ),
        (scenario(user("alice", name=None), user("bob")), "users[0].name must be a non-empty string"),
        (scenario(user("alice", name=""), user("bob")), "users[0].name must be a non-empty string"),
        (
            scenario(user("alice", name="A" * 201), user("bob")),
            "users[0].name must be at most 200 characters, got 201",
        ),
        (
            scenario(user("alice", instructions=5), user("bob")),
            "users[0].instructions must be a string, got number",
        ),
        (scenario(user("alice"), user("bob", intro=None)), "users[1].intro must be a string, got null"),
        (
            scenario(user("alice"), user("bob", location=["Leeds"])),
            "users[1].location must be a string, got array",
        ),
        (
            scenario(user("alice"), user("bob", timezone=True)),
            "users[1].timezone must be a string, got boolean",
        ),
        (
            scenario(user("alice", instrucions="typo"), user("bob")),
            'users[0] has unknown key "instrucions"',
        ),
        (
            scenario(user("alice", role="x", email="y"), user("bob")),
            'users[0] has unknown keys "email", "role"',
        ),
        (scenario(user("alice"), {"id": "bob", "name": "Bob"}), "users[1].intents is required"),
        (
            scenario(user("alice"), user("bob", intents={"id": "x", "intent": "y"})),
            "users[1].intents must be an array, got object",
        ),
        (scenario(user("alice"), user("bob", intents=[])), "users[1].intents must hold at least one intent"),
        (
            scenario(user("alice", intents=["Find a designer"]), user("bob")),
            "users[0].intents[0] must be an object, got string",
        ),
        (
            scenario(user("alice", intents=[{"intent": "Find a designer"}]), user("bob")),
            "users[0].intents[0].id is required",
        ),
        (
            scenario(user("alice", intents=[{"id": "", "intent": "Find a designer"}]), user("bob")),
            "users[0].intents[0].id must be a non-empty string",
        ),
        (
            scenario(user("alice", intents=[{"id": "i" * 201, "intent": "Find a designer"}]), user("bob")),
            "users[0].intents[0].id must be at most 200 characters, got 201",
        ),
        (
            scenario(user("alice"), user("bob"), user("carla", intents=[{"id": "x"}])),
            "users[2].intents[0].intent is required",
        ),
        (
            scenario(user("alice"), user("bob"), user("carla", intents=[{"id": "x", "intent": " \n"}])),
            "users[2].intents[0].intent must be a non-empty string",
        ),
        (
            scenario(user("alice"), user("bob"), user("carla", intents=[{"id": "x", "intent": 3}])),
            "users[2].intents[0].intent must be a non-empty string",
        ),
        (
            scenario(user("alice", intents=[{"id": "x", "intent": "y", "text": "z"}]), user("bob")),
            'users[0].intents[0] has unknown key "text"',
        ),
        (scenario(user("alice"), user("bob"), user("alice")), 'users[2].id "alice" duplicates users[0].id'),
        (
            scenario(user("alice"), user("bob", "x", "y", "x")),
            'users[1].intents[2].id "x" duplicates users[1].intents[0].id',
        ),
        (
            scenario(user("alice"), user("Alice")),
            'users[1].id "Alice" gives slug "alice", as users[0].id does',
        ),
        (
            scenario(user("alice-smith"), user("bob"), user("Alice Smith!")),
            'users[2].id "Alice Smith!" gives slug "alice-smith", as users[0].id does',
        ),
        (scenario(user("alice"), user("!!!")), 'users[1].id "!!!" gives an empty slug'),
        (scenario(user("alice"), user("日本")), 'users[1].id "日本" gives an empty slug'),
        (
            scenario(user("alice"), user("b" * 64)),
            f'users[1].id "{"b" * 64}" gives a slug longer than 63 characters',
        ),
    ],
)
def test_invalid_scenarios_are_refused_with_the_place_named(raw: object, message: str) -> None:
    with pytest.raises(ScenarioError) as refused:
        scenario_parse(raw)

    assert str(refused.value) == message


def test_a_refused_scenario_writes_nothing(tenant: Tenant) -> None:
    data = scenario(user("alice"), user("bob"), user("carla", intents=[]))

    with pytest.raises(ScenarioError):
        scenario_import(tenant=tenant, data=data)

    assert not Agent.objects.for_tenant(tenant).exists()


def test_a_valid_scenario_parses_to_typed_values() -> None:
    parsed = scenario_parse(
        scenario(user("Alice Morgan", "p", instructions="Brief", timezone="Europe/Lisbon"), user("bob"))
    )

    alice, bob = parsed.users
    assert (alice.id, alice.slug, alice.name, alice.instructions, alice.timezone) == (
        "Alice Morgan",
        "alice-morgan",
        "Alice Morgan",
        "Brief",
        "Europe/Lisbon",
    )
    assert [(i.id, i.intent) for i in alice.intents] == [("p", "Alice Morgan wants p")]
    assert (bob.instructions, bob.intro, bob.location, bob.timezone) == ("", "", "", "")


# --- the command ---------------------------------------------------------------------------------


def write(tmp_path: Path, content: object) -> Path:
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(content), encoding="utf-8")
    return path


def test_the_command_creates_the_tenant_when_asked(db: None, tmp_path: Path) -> None:
    path = write(tmp_path, scenario(user("alice", "a1", "a2"), user("bob")))
    out = StringIO()

    call_command(
        "import_scenario",
        str(path),
        "--tenant",
        "newco",
        "--create-tenant",
        "--tenant-name",
        "New Co",
        stdout=out,
    )

    assert out.getvalue() == (
        f"Imported {path} into new tenant newco: agents created 2, updated 0; intents created 3, updated 0.\n"
        "Principals created: newco.alice, newco.bob (principal members with no password and a "
        "placeholder e-mail until they are invited).\n"
    )
    newco = Tenant.objects.get(slug="newco")
    assert newco.name == "New Co"
    assert Agent.across_tenants.get(tenant=newco, slug="alice").party_id == "newco:user:alice"


def test_create_tenant_reuses_an_existing_tenant(tenant: Tenant, tmp_path: Path) -> None:
    path = write(tmp_path, scenario())
    out = StringIO()

    call_command("import_scenario", str(path), "--tenant", "acme", "--create-tenant", stdout=out)

    assert out.getvalue().startswith(f"Imported {path} into tenant acme: agents created 2,")
    assert Tenant.objects.filter(slug="acme").count() == 1


def test_the_command_warns_about_unknown_time_zones(tenant: Tenant, tmp_path: Path) -> None:
    path = write(tmp_path, scenario(user("alice", timezone="Mars/Olympus"), user("bob", timezone="Atlantis")))
    err = StringIO()

    call_command("import_scenario", str(path), "--tenant", "acme", stdout=StringIO(), stderr=err)

    assert err.getvalue() == "Unknown time zone for alice, bob; their agents use UTC.\n"


def test_the_command_refuses_an_invalid_scenario_and_creates_no_tenant(db: None, tmp_path: Path) -> None:
    path = write(tmp_path, scenario(user("alice"), user("alice")))

    with pytest.raises(CommandError) as refused:
        call_command("import_scenario", str(path), "--tenant", "newco", "--create-tenant")

    assert str(refused.value) == f'{path}: users[1].id "alice" duplicates users[0].id'
    assert not Tenant.objects.filter(slug="newco").exists()
    assert not Agent.across_tenants.exists()


@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        (None, ["--tenant", "acme"], "No such file: {path}"),
        (
            '{"users": [\n  {"id": "a",}\n]}',
            ["--tenant", "acme"],
            "{path} is not valid JSON: Expecting property name enclosed in double quotes "
            "at line 2, column 14.",
        ),
        ("", ["--tenant", "acme"], "{path} is not valid JSON: Expecting value at line 1, column 1."),
        (b"\xff\xfe", ["--tenant", "acme"], "{path} is not UTF-8 text (byte 0)."),
        ("dir", ["--tenant", "acme"], "Cannot read {path}: Is a directory."),
        ("[]", ["--tenant", "acme"], "{path}: top level must be an object, got array"),
        ("{}", ["--tenant", "nope"], 'No tenant "nope"; pass --create-tenant to create it.'),
        (
            "{}",
            ["--tenant", "acme", "--tenant-name", "Acme"],
            "--tenant-name only applies with --create-tenant.",
        ),
        (
            json.dumps(scenario()),
            ["--tenant", "Bad Slug", "--create-tenant"],
            "Cannot create tenant 'Bad Slug': slug: Enter a valid “slug” consisting of letters, numbers, "
            "underscores or hyphens.",
        ),
    ],
    ids=[
        "missing-file",
        "bad-json",
        "empty-file",
        "not-utf8",
        "directory",
        "bad-scenario",
        "unknown-tenant",
        "name-without-create",
        "bad-tenant-slug",
    ],
)
def test_the_command_errors(
    tenant: Tenant, tmp_path: Path, content: str | bytes | None, args: list[str], message: str
) -> None:
    path = tmp_path / "scenario.json"
    if content == "dir":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content, encoding="utf-8")

    with pytest.raises(CommandError) as refused:
        call_command("import_scenario", str(path), *args)

    assert str(refused.value) == message.format(path=path)
    assert list(Tenant.objects.values_list("slug", flat=True)) == ["acme"]
    assert not Agent.across_tenants.exists()
