"""What AnsiballZ ships with each module: the module_utils files a module imports, transitively.

AnsiballZ's finder reads every `import` and `from ... import` of a module and of each module_utils
file it ships, wherever the statement stands (in a function or a try block too), so an AST walk
gives the same set without building a payload. Used by tests/unit/test_module_utils_layers.py (the
layers and the budget) and by the collector's test (the files role monitoring installs)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULE_UTILS = ROOT / 'plugins' / 'module_utils'
MODULES = ROOT / 'plugins' / 'modules'
PACKAGE = 'ansible_collections.gpulab.inference.plugins.module_utils'


def imported_names(path):
    """{module_utils file name (no .py): set of names taken from it} of one Python file."""
    found = {}
    for node in ast.walk(ast.parse(Path(path).read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module == PACKAGE:
            for alias in node.names:
                found.setdefault(alias.name, set()).add(alias.asname or alias.name)
        elif isinstance(node, ast.ImportFrom) and (node.module or '').startswith(PACKAGE + '.'):
            name = node.module[len(PACKAGE) + 1:].split('.')[0]
            found.setdefault(name, set()).update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE + '.'):
                    found.setdefault(alias.name[len(PACKAGE) + 1:].split('.')[0], set()).add(alias.asname or alias.name)
    return found


def module_utils_edges():
    """{module_utils file: the module_utils files it imports}."""
    return dict((path.stem, set(imported_names(path))) for path in sorted(MODULE_UTILS.glob('*.py'))
                if path.stem != '__init__')


def closure(names, edges=None):
    """names and every module_utils file they import, transitively."""
    edges = module_utils_edges() if edges is None else edges
    seen, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(edges.get(name, ()))
    return seen


def lines(name):
    return len((MODULE_UTILS / (name + '.py')).read_text().splitlines())


def shipped():
    """{module: sorted module_utils files AnsiballZ ships with it}, for every plugins/modules file."""
    edges = module_utils_edges()
    return dict((path.stem, sorted(closure(imported_names(path), edges)))
                for path in sorted(MODULES.glob('*.py')) if path.stem != '__init__')


def table():
    """The closure table of docs/benchmarks.md: module, files, lines; then the mean per module."""
    rows = [(module, len(files), sum(lines(name) for name in files)) for module, files in shipped().items()]
    mean = float(sum(row[2] for row in rows)) / len(rows)
    return rows, mean


if __name__ == '__main__':
    ROWS, MEAN = table()
    print('| module | module_utils files shipped | lines shipped |\n|---|---:|---:|')
    for ROW in ROWS:
        print('| %s | %d | %d |' % ROW)
    print('\n%d modules, mean %.0f lines shipped per module' % (len(ROWS), MEAN))
