# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action of module file_set: renders the entries' templates and reads their sources on the
controller, as ansible.builtin.template and ansible.builtin.copy do, then runs the module once
with every entry's text."""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase

try:
    from ansible.template import trust_as_template
except ImportError:  # ansible-core before 2.19: no trust tags, and a whole file renders through do_template
    trust_as_template = None

from ansible_collections.gpulab.inference.plugins.module_utils.file_set import entry_problems

# ansible.builtin.template's defaults, so that a template renders the same through either.
TEMPLATE_OVERRIDES = dict(trim_blocks=True, lstrip_blocks=False, newline_sequence='\n')


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(('files',))

    def _search_path(self, task_vars, source):
        """Where a template's includes are looked up: ansible.builtin.template's search path."""
        paths = list(task_vars.get('ansible_search_path', [])) + [self._loader.get_basedir(), os.path.dirname(source)]
        search = []
        for path in paths:
            search.extend([os.path.join(path, 'templates'), path])
        return search

    def _render(self, entry, task_vars):
        try:
            source = self._find_needle('templates', entry['template'])
        except AnsibleError as error:
            raise AnsibleActionFail('file_set: %s: %s' % (entry.get('path'), to_text(error)))
        variables = dict(task_vars)
        variables.update(entry.get('vars') or {})
        templar = self._templar.copy_with_new_env(searchpath=self._search_path(task_vars, source),
                                                  available_variables=variables)
        if trust_as_template is None:
            real = self._loader.get_real_file(source)
            try:
                with open(real, 'rb') as stream:
                    text = to_text(stream.read(), errors='surrogate_or_strict')
            finally:
                self._loader.cleanup_tmp_file(real)
            rendered = templar.do_template(text, preserve_trailing_newlines=True, escape_backslashes=False,
                                           overrides=TEMPLATE_OVERRIDES)
        else:
            text = trust_as_template(self._loader.get_text_file_contents(source))
            rendered = templar.template(text, escape_backslashes=False, overrides=TEMPLATE_OVERRIDES)
        return '' if rendered is None else to_text(rendered)

    def _read(self, entry):
        try:
            source = self._find_needle('files', entry['src'])
            with open(source, 'rb') as stream:
                return stream.read().decode('utf-8')
        except (AnsibleError, OSError, UnicodeDecodeError) as error:
            raise AnsibleActionFail('file_set: %s: cannot read src %s: %s' % (entry.get('path'), entry['src'], to_text(error)))

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        entries = self._task.args.get('files')
        if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
            raise AnsibleActionFail('file_set: files must be a list of entries (dicts), not %r' % type(entries).__name__)
        module_entries = []
        for entry in entries:
            sources = [key for key in ('content', 'template', 'src') if entry.get(key) is not None]
            if len(sources) > 1:
                raise AnsibleActionFail('file_set: %s: give one of content, template and src, not %s'
                                        % (entry.get('path'), ' and '.join(sources)))
            module_entry = dict((key, value) for key, value in entry.items() if key not in ('template', 'src', 'vars'))
            if entry.get('template') is not None:
                module_entry['content'] = self._render(entry, task_vars)
            elif entry.get('src') is not None:
                module_entry['content'] = self._read(entry)
            module_entries.append(module_entry)
        # Checked here too, so that a mode written unquoted in YAML (an int) is refused before the module
        # run turns it into a string.
        problems = entry_problems(module_entries)
        if problems:
            raise AnsibleActionFail('file_set: %s' % '; '.join(problems))
        try:
            result.update(self._execute_module(module_name='gpulab.inference.file_set',
                                               module_args=dict(files=module_entries), task_vars=task_vars))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result
