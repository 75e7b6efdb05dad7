"""The engine seam: role common's engine table (gpulab_engines) and its reader
(plugins/module_utils/engines.py) say what an engine is, so a third engine is one table entry and
one role. A file of the collection that branches on an engine's name (compares a value with it, or
tests it for membership) outside the places below fails this test.

The places allowed: the table and its reader; each engine's own roles (its table entry's role and
the roles that role alone includes, found from its task files); the planners, which model an
engine's memory and layout by design (listed, each with its reason).
"""

import re
from pathlib import Path

import yaml

from collection_tree import collection_files

REPO_ROOT = Path(__file__).resolve().parents[2]
TABLE = REPO_ROOT / "roles" / "common" / "defaults" / "main" / "engines.yml"
READER = ("plugins/module_utils/engines.py", "roles/common/defaults/main/engines.yml")

# The planners: what an engine fits and how it is laid out is engine knowledge by nature.
PLANNERS = {
    "plugins/module_utils/model_plan.py": "plan.yml's table: the GGUF planner or the checkpoint planner",
    "plugins/modules/model_plan.py": "plan.yml's module, which calls one of them by the model's format",
}


def engine_names(table_path=TABLE):
    return list(yaml.safe_load(table_path.read_text())["gpulab_engines"])


def branch_pattern(names):
    """A comparison with an engine's name, or a membership test of it, in Python or Jinja."""
    name = "(?:%s)" % "|".join(re.escape(n) for n in names)
    quoted = r"""['"]%s['"]""" % name
    return re.compile(r"(?:==|!=)\s*%s|%s\s*(?:==|!=|\bin\b|\bnot\s+in\b)|\bin\s*[\[(]\s*%s" % (quoted, quoted, quoted))


def included_roles(role, root=REPO_ROOT):
    """The roles a role's task files include or import, by their FQCN."""
    found = set()
    for path in sorted((root / "roles" / role / "tasks").rglob("*.yml")):
        found.update(re.findall(r"name:\s*gpulab\.inference\.([a-z_]+)", path.read_text()))
    return found - {role}


def engine_roles(root=REPO_ROOT):
    """Each engine's own roles: its table role and every role it reaches that no other engine reaches."""
    table = yaml.safe_load((root / "roles" / "common" / "defaults" / "main" / "engines.yml").read_text())["gpulab_engines"]
    reached = {}
    for name, entry in table.items():
        start = entry["role"].split(".")[-1]
        seen, todo = set(), [start]
        while todo:
            role = todo.pop()
            if role in seen or not (root / "roles" / role).is_dir():
                continue
            seen.add(role)
            todo.extend(included_roles(role, root))
        reached[name] = seen
    own = set()
    for name, roles in reached.items():
        others = set().union(*[r for n, r in reached.items() if n != name]) if len(reached) > 1 else set()
        own |= roles - others
    # role common is everybody's: it is the table's home, never an engine's own
    return sorted(own - {"common", "service"})


def branches(root=REPO_ROOT):
    pattern = branch_pattern(engine_names(root / "roles" / "common" / "defaults" / "main" / "engines.yml"))
    own = tuple("roles/%s/" % role for role in engine_roles(root))
    found = []
    for path in collection_files(root):
        if path in READER or path in PLANNERS or path.startswith(own):
            continue
        try:
            lines = (root / path).read_text().splitlines()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(lines, 1):
            if pattern.search(line) and not line.lstrip().startswith("#"):
                found.append("%s:%d: %s" % (path, number, line.strip()))
    return found


def test_the_pattern_finds_branches_and_not_names():
    pattern = branch_pattern(["llama_cpp", "vllm"])
    for line in ("when: gpulab_engine_resolved == 'vllm'", 'if entry["engine"] == "llama_cpp":',
                 "if 'llama_cpp' in engines:",
                 "stop_engine not in ['llama_cpp', 'vllm']", "{{ 'vllm' != engine }}"):
        assert pattern.search(line), line
    for line in ("role: gpulab.inference.vllm_server", "engine: llama_cpp", "'vllm': vllm_result(ok)",
                 "gpulab_engines['vllm'].units", "label: vLLM"):
        assert not pattern.search(line), line


def test_each_engine_owns_its_roles():
    roles = engine_roles()
    assert {"llama_cpp", "llama_server", "llama_rpc_server", "llama_cpp_build", "memory_plan", "vllm_server"} <= set(roles)
    # the model role serves both engines: it is no engine's own
    assert "model" not in roles and "gpu_drain" not in roles


def test_no_file_outside_the_table_the_engines_roles_and_the_planners_branches_on_an_engine():
    found = branches()
    assert not found, "ask role common's engine table (gpulab_engine_spec) instead:\n" + "\n".join(found)


def test_the_rule_finds_a_new_offender(tmp_path):
    (tmp_path / "roles" / "common" / "defaults" / "main").mkdir(parents=True)
    (tmp_path / "roles" / "common" / "defaults" / "main" / "engines.yml").write_text(TABLE.read_text())
    (tmp_path / "roles" / "bench" / "tasks").mkdir(parents=True)
    (tmp_path / "roles" / "bench" / "tasks" / "main.yml").write_text("- when: gpulab_engine_resolved == 'vllm'\n")
    assert branches(tmp_path) == ["roles/bench/tasks/main.yml:1: - when: gpulab_engine_resolved == 'vllm'"]
