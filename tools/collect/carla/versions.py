"""The CARLA releases a CARLA run can use, 0.9.15 and 0.9.16, and which one a set-up is.

A CARLA run is four things of one release: the server (CARLA_ROOT), the client (the `carla` module this Python
imports), scenario_runner (SCENARIO_RUNNER_ROOT, at the release's tag) and the leaderboard commit that fits that
scenario_runner. Each is read here without a server and compared before anything starts (`check_release`, called by
tools.collect.carla.run.check_setup and by carla-check): a mismatch is one line naming every part, its version and
where it was read, and the fix. The server's own answer is checked again when it starts (server.py).

`python -m tools.collect.carla.versions pins VERSION` prints the release's pins as shell assignments: the CARLA image
reads its client, leaderboard and scenario_runner from here (containers/carla.def), so the pins live in one place.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tools.collect.base.town import carla_client_version

#: Chooses the release of an image (containers/carla.def's build argument, set in the image's environment); on a
#: workstation the release is read from CARLA_ROOT, and CARLA_VERSION, when set, must agree with it.
VERSION_ENV = "CARLA_VERSION"
_VERSION = re.compile(r"\d+\.\d+\.\d+")


@dataclass(frozen=True)
class Release:
    version: str
    #: The pip requirement of its client for Python 3.11. CARLA publishes no cp311 build of 0.9.15 (`carla==0.9.15`
    #: stops at cp310): `carla-0-9-15` is a build of the same client, the same import name `carla`.
    client: str
    #: The leaderboard commit that fits its scenario_runner: leaderboard master (aec81319) calls
    #: CarlaDataProvider.set_ego_route and hands ScenarioTriggerer (route var, location, name) triples, which only
    #: scenario_runner 0.9.16 has; leaderboard-2.0's head (a87a3419, what Bench2Drive and LEAD run with 0.9.15)
    #: hands pairs, which only 0.9.15 unpacks.
    leaderboard_commit: str
    leaderboard_branch: str
    scenario_runner_commit: str  # its tag, v<version>

    @property
    def scenario_runner_tag(self) -> str:
        return f"v{self.version}"


RELEASES = {
    "0.9.15": Release("0.9.15", "carla-0-9-15==0.0.1", "a87a3419e9d2e0d36deb25f1f26c17edee2d1420", "leaderboard-2.0",
                      "d12d8bb788201ebf6f03e55b9c5169f9dcb2ea87"),
    "0.9.16": Release("0.9.16", "carla==0.9.16", "aec81319de6bec57372f25aa94083c9ab0bd4223", "master",
                      "94ff3b8af752bad2b9d464ad5105868906aa34c0"),
}
#: The release images are built for and fixes name when nothing else says: what LEAD and Bench2Drive evaluate on
#: (LEAD's known issues advise against 0.9.16's goal points), with the same lane graph and routes from either client
#: (docs/carla.md).
DEFAULT = "0.9.15"
LEADERBOARD_URL = "https://github.com/carla-simulator/leaderboard"
SCENARIO_RUNNER_URL = "https://github.com/carla-simulator/scenario_runner"


#: What the leaderboard evaluator and scenario_runner import beyond our own dependencies: pyproject.toml's `carla`
#: extra, the same list (tests/collect/carla/test_carla_versions.py checks). The module each is imported as, where
#: that is not its name.
EVALUATOR_PACKAGES = ("py-trees==0.8.3", "antlr4-python3-runtime==4.10", "dictor==0.1.12", "ephem==4.2.1",
                      "networkx==3.6.1", "pexpect==4.9.0", "requests==2.34.2", "shapely==2.2.0",
                      "simple-watchdog-timer==0.1.1", "six==1.17.0", "tabulate==0.10.0", "transforms3d==0.4.2",
                      "setuptools>=70,<82")
_MODULE_PACKAGE = {"py_trees": "py-trees", "antlr4": "antlr4-python3-runtime", "pkg_resources": "setuptools",
                   "simple_watchdog_timer": "simple-watchdog-timer"}


def install_package(module: str) -> str | None:
    """The pip command that installs the evaluator's package imported as `module`, None when it is not one."""
    name = _MODULE_PACKAGE.get(module, module.replace("_", "-")).lower()
    for requirement in EVALUATOR_PACKAGES:
        if re.split(r"[=<>!~]", requirement, maxsplit=1)[0].lower() == name:
            return f"{sys.executable} -m pip install '{requirement}'"
    return None


class VersionError(Exception):
    """One line: which parts of a CARLA set-up are which release, and the fix (run.py makes it a ToolError)."""


def release(version: str, what: str) -> Release:
    """The release of `version`; VersionError naming `what` (where the version came from) when it is none of ours."""
    if version not in RELEASES:
        raise VersionError(f"{what} is CARLA {version}; drivekit runs CARLA {' or '.join(RELEASES)}")
    return RELEASES[version]


def wanted(env: Mapping[str, str]) -> Release | None:
    """The release CARLA_VERSION names, None when it is not set."""
    value = env.get(VERSION_ENV, "").strip()
    return release(value, f"{VERSION_ENV}={value}") if value else None


def server_version(carla_root: Path) -> tuple[str | None, str]:
    """The CARLA version of a release folder and where it was read: its VERSION file (a release's packaging writes
    the git tag there), else the names of its client packages (PythonAPI/carla/dist/carla-<version>-*.whl or
    .egg). (None, "") for a folder that says neither (a source build: the server's answer at start is then the
    only check)."""
    version_file = carla_root / "VERSION"
    if version_file.is_file():
        found = _VERSION.match(version_file.read_text(errors="replace").strip())
        if found:
            return found.group(0), "its VERSION file"
    dist = carla_root / "PythonAPI" / "carla" / "dist"
    names = [p.name for p in dist.glob("carla-*") if p.suffix in (".whl", ".egg")] if dist.is_dir() else []
    versions = sorted({n.split("-")[1] for n in names if _VERSION.fullmatch(n.split("-")[1])})
    if len(versions) == 1:  # several (a folder of mixed packages) say nothing
        return versions[0], "its PythonAPI/carla/dist"
    return None, ""


def scenario_runner_version(root: Path) -> tuple[str | None, str]:
    """scenario_runner's version and where it was read: the first release heading of Docs/CHANGELOG.md
    ("## CARLA ScenarioRunner 0.9.15"; its CARLA_VER file and scenario_runner.py's VERSION still say 0.9.13 at
    both tags). (None, "") when there is no such heading."""
    changelog = root / "Docs" / "CHANGELOG.md"
    if changelog.is_file():
        found = re.search(r"^## CARLA ScenarioRunner (\d+\.\d+\.\d+)", changelog.read_text(errors="replace"), re.M)
        if found:
            return found.group(1), "its Docs/CHANGELOG.md"
    return None, ""


def leaderboard_fits(leaderboard: Path, scenario_runner: Path) -> bool | None:
    """Whether the leaderboard and scenario_runner agree on CarlaDataProvider.set_ego_route, which leaderboard
    master calls and only scenario_runner 0.9.16 defines (with it came the triples ScenarioTriggerer unpacks).
    None when either file is missing (a stand-in)."""
    calls = leaderboard / "leaderboard" / "scenarios" / "route_scenario.py"
    defines = scenario_runner / "srunner" / "scenariomanager" / "carla_data_provider.py"
    if not calls.is_file() or not defines.is_file():
        return None
    return ("set_ego_route" in calls.read_text(errors="replace")) == \
        ("def set_ego_route" in defines.read_text(errors="replace"))


def install_client(rel: Release) -> str:
    """The commands that make this Python's client the release's (both packages install the module `carla`: the
    other one goes first)."""
    return (f"{sys.executable} -m pip uninstall -y carla carla-0-9-15 && {sys.executable} -m pip install "
            f"{rel.client}")


def checkout(rel: Release, var: str) -> str:
    if var == "LEADERBOARD_ROOT":
        return f"git -C ${var} checkout {rel.leaderboard_commit} (the head of {rel.leaderboard_branch})"
    return f"git -C ${var} checkout {rel.scenario_runner_commit} (tag {rel.scenario_runner_tag})"


def check_release(env: Mapping[str, str], carla_root: Path | None, leaderboard: Path, scenario_runner: Path,
                  client: str | None = None, what: str = "--world=carla") -> Release:
    """The release of a CARLA set-up: the server's (CARLA_ROOT, when given), the client's and scenario_runner's
    versions, and CARLA_VERSION when set, must be one release, and the leaderboard must fit its scenario_runner.
    VersionError of one line otherwise. `client`: the client's version (default: what the installed client says)."""
    try:
        return _check_release(env, carla_root, leaderboard, scenario_runner, client, what)
    except VersionError as e:
        message = str(e)
        raise VersionError(message if message.startswith(f"{what}: ") else f"{what}: {message}") from None


def _check_release(env: Mapping[str, str], carla_root: Path | None, leaderboard: Path, scenario_runner: Path,
                   client: str | None, what: str) -> Release:
    client = carla_client_version() if client is None else client
    asked = wanted(env)
    parts: list[tuple[str, str | None, str]] = []  # (part, version, where it was read)
    if asked is not None:
        parts.append((VERSION_ENV, asked.version, "set"))
    if carla_root is not None:
        version, where = server_version(carla_root)
        parts.append(("the server", version, f"CARLA_ROOT={carla_root}, {where}"))
    parts.append(("the client", client, f"the carla module of {sys.executable}"))
    version, where = scenario_runner_version(scenario_runner)
    parts.append(("scenario_runner", version, f"SCENARIO_RUNNER_ROOT={scenario_runner}, {where}"))
    known = [(part, v, where) for part, v, where in parts if v is not None]
    for part, v, where in known:
        release(v, f"{part} ({where})")  # one we do not run is refused by name
    versions = {v for _, v, _ in known}
    # the server is the hardest part to change: the others follow it, then CARLA_VERSION, then the default
    target = RELEASES[next((v for part, v, _ in known if part == "the server"), None)
                      or (asked.version if asked else None) or DEFAULT]
    if client is None:
        raise VersionError(f"{what}: no carla client in {sys.executable}; install CARLA {target.version}'s: "
                           f"{install_client(target)}")
    if len(versions) > 1:
        said = ", ".join(f"{part} {v} ({where})" for part, v, where in known)
        fixes = []
        for part, v, _ in known:
            if v == target.version:
                continue
            if part == "the client":
                fixes.append(install_client(target))
            elif part == "scenario_runner":
                fixes.append(checkout(target, "SCENARIO_RUNNER_ROOT") + " and " + checkout(target, "LEADERBOARD_ROOT"))
            elif part == VERSION_ENV:
                fixes.append(f"set {VERSION_ENV}={target.version} or unset it")
        raise VersionError(f"{what}: the parts of this CARLA set-up are different releases: {said}; make them all "
                           f"CARLA {target.version}: {'; '.join(fixes)}")
    rel = RELEASES[versions.pop()] if versions else target
    if leaderboard_fits(leaderboard, scenario_runner) is False:
        raise VersionError(f"{what}: the leaderboard at LEADERBOARD_ROOT={leaderboard} does not fit scenario_runner "
                           f"{rel.scenario_runner_tag} (they disagree on CarlaDataProvider.set_ego_route and on "
                           "ScenarioTriggerer's entries: every route would crash); "
                           f"{checkout(rel, 'LEADERBOARD_ROOT')}")
    return rel


def main(argv: list[str]) -> int:
    """`pins VERSION`: the release's pins as shell assignments (containers/carla.def)."""
    if len(argv) != 2 or argv[0] != "pins":
        print("usage: python -m tools.collect.carla.versions pins VERSION", file=sys.stderr)
        return 2
    try:
        rel = release(argv[1], f"{VERSION_ENV}={argv[1]}")
    except VersionError as e:
        print(f"tools.collect.carla.versions: {e}", file=sys.stderr)
        return 1
    print(f"CARLA_CLIENT='{rel.client}'\nLEADERBOARD_COMMIT={rel.leaderboard_commit}\n"
          f"SCENARIO_RUNNER_COMMIT={rel.scenario_runner_commit}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
