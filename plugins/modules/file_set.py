#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: file_set
short_description: A role's files and directories in one module run, each written atomically and only when it differs
version_added: 0.1.0
description:
  - Makes each entry of O(files) what it says, in order - a directory, a file with the given content, or no file - with
    its owner, group and mode, and reports which paths it changed.
  - One module run for the whole list. M(ansible.builtin.template) and M(ansible.builtin.copy) take two runs for a file
    that is already right (a stat, then the file module for its attributes), M(ansible.builtin.file) one per directory,
    and a deploy that changes nothing runs them all.
  - Its action plugin renders the entries given as O(files[].template) on the controller (the role's C(templates/),
    with the task's variables and the entry's O(files[].vars)) and reads those given as O(files[].src) (the role's
    C(files/)), as M(ansible.builtin.template) and M(ansible.builtin.copy) do; the module gets their text as
    O(files[].content).
  - A file is replaced by a rename of a new file written beside it, never rewritten in place. Every new file is written,
    and checked with its O(files[].validate) command, before the first target is replaced, so an entry that fails its
    check leaves all of them as they were. Directories come first, removals last.
  - A path that holds something else than the entry asks for (a directory where a file belongs, a symbolic link, a
    device) fails the task before any change.
author:
  - gpulab.inference contributors (@gpulab)
options:
  files:
    description: The entries, applied in this order.
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description: Absolute, normalised path.
        type: path
        required: true
      state:
        description: A regular file with O(files[].content), a directory (missing parents are created with the same
          attributes, as M(ansible.builtin.file) does), or no file at the path.
        type: str
        choices: [file, directory, absent]
        default: file
      content:
        description: The file's text, written as UTF-8 (filled in by the action plugin from O(files[].template) or
          O(files[].src)).
        type: str
      template:
        description: A template of the role's C(templates/) (or a path), rendered on the controller; action plugin only.
        type: str
      src:
        description: A file of the role's C(files/) (or a path), copied as it is; action plugin only.
        type: str
      vars:
        description: Variables for this entry's template, on top of the task's; action plugin only.
        type: dict
      mode:
        description: Octal permissions as a string, such as V("0644"); required for a file or a directory.
        type: str
      owner:
        description: User name that owns the path; left as it is when not given.
        type: str
      group:
        description: Group name of the path; left as it is when not given.
        type: str
      validate:
        description: Command that checks a new file before it replaces the target; C(%s) is the new file's path. Not run
          in check mode, or when the file is already right.
        type: str
attributes:
  check_mode:
    support: full
    description: Reports what would change; writes nothing and runs no O(files[].validate) command.
  diff_mode:
    support: full
    description: The text before and after of each file it writes (files up to 64 KiB).
  action:
    support: full
    description: Templates and sources are read on the controller.
seealso:
  - module: ansible.builtin.template
  - module: ansible.builtin.copy
  - module: ansible.builtin.file
"""

EXAMPLES = r"""
- name: Render the firewall's rule set and its unit, with their directory
  gpulab.inference.file_set:
    files:
      - {path: /etc/nftables.d, state: directory, owner: root, group: root, mode: "0755"}
      - path: /etc/nftables.d/gpulab-rpc.nft
        template: gpulab-rpc.nft.j2
        mode: "0644"
        validate: nft --check -f %s
      - {path: /etc/systemd/system/gpulab-rpc-server-firewall.service, template: firewall.service.j2, mode: "0644"}
      - {path: /etc/gpulab/old-state.json, state: absent}
  register: firewall_files
"""

RETURN = r"""
changed_paths:
  description: The entries' paths that were (in check mode, would be) created, written, given other attributes or removed.
  returned: success
  type: list
  elements: str
  sample: [/etc/nftables.d/gpulab-rpc.nft]
files:
  description: One item per entry, in order.
  returned: success
  type: list
  elements: dict
  contains:
    path:
      description: The entry's path.
      type: str
    state:
      description: The entry's state.
      type: str
    steps:
      description: What was done (mkdir, write, chmod, chown, remove); empty when the path was already right.
      type: list
      elements: str
"""

import grp
import pwd
import shlex

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpulab.inference.plugins.module_utils import file_set as fs


def _lookup(module, kind, entry):
    """uid or gid of a name; in check mode a name not there yet (its account is made earlier in the same run) is None."""
    name = entry.get(kind)
    if not name:
        return None
    try:
        return pwd.getpwnam(name).pw_uid if kind == 'owner' else grp.getgrnam(name).gr_gid
    except KeyError:
        if module.check_mode:
            return None
        module.fail_json(msg='%s: %s %r does not exist on this node; create it first' % (entry['path'], kind, name))
    return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            files=dict(type='list', elements='dict', required=True, options=dict(
                path=dict(type='path', required=True),
                state=dict(type='str', choices=list(fs.STATES), default='file'),
                content=dict(type='str', no_log=False),
                template=dict(type='str'),
                src=dict(type='str'),
                vars=dict(type='dict'),
                mode=dict(type='str'),
                owner=dict(type='str'),
                group=dict(type='str'),
                validate=dict(type='str'),
            )),
        ),
        supports_check_mode=True,
    )
    entries = module.params['files']
    unrendered = [entry['path'] for entry in entries if entry.get('template') or entry.get('src')]
    if unrendered:
        module.fail_json(msg='template and src are read by the action plugin gpulab.inference.file_set; '
                             'call the module through it (entries: %s)' % ', '.join(unrendered))
    problems = fs.entry_problems(entries)
    if problems:
        module.fail_json(msg='file_set: %s' % '; '.join(problems), problems=problems)

    plans, diffs, problems = [], [], []
    for entry in entries:
        uid = _lookup(module, 'owner', entry)
        gid = _lookup(module, 'group', entry)
        current = fs.current_state(entry['path'])
        after = entry['content'].encode('utf-8') if entry['state'] == 'file' else None
        before = None
        if after is not None and current['kind'] == 'file':
            before = fs.read_small(entry['path'], len(after))
        steps, problem = fs.plan_entry(entry, current, uid, gid, before)
        if problem:
            problems.append(problem)
        if (uid is None and entry.get('owner')) or (gid is None and entry.get('group')):
            # an account made later in the same run: the path will get it then
            steps = steps or ['chown']
        plans.append((steps, uid, gid))
        if 'write' in steps and module._diff:
            diff = fs.diff_of(entry['path'], before, after)
            if diff:
                diffs.append(diff)
    if problems:
        module.fail_json(msg='file_set: %s' % '; '.join(problems), problems=problems)

    def run_validate(command, path):
        rc, out, err = module.run_command([part.replace('%s', path) for part in shlex.split(command)])
        return None if rc == 0 else (err or out or 'exit status %d' % rc).strip()

    if not module.check_mode:
        try:
            fs.apply_entries(entries, plans, run_validate)
        except (OSError, RuntimeError) as error:
            module.fail_json(msg='file_set: %s' % error)

    changed_paths = [entry['path'] for entry, (steps, _uid, _gid) in zip(entries, plans) if steps]
    result = dict(
        changed=bool(changed_paths),
        changed_paths=changed_paths,
        files=[dict(path=entry['path'], state=entry['state'], steps=list(steps))
               for entry, (steps, _uid, _gid) in zip(entries, plans)],
    )
    if diffs:
        result['diff'] = diffs
    module.exit_json(**result)


if __name__ == '__main__':
    main()
