"""The live ``p2enforcer`` groups of this process, by label (torch's group name).

A group registers itself when it is made and leaves when it is destroyed;
:func:`enforcer.step`, the plan runtimes of every group (:mod:`enforcer.runtime.plan_groups`)
and the bypass counter (:mod:`enforcer.group.bypass`) find the groups here.
"""

from __future__ import annotations

import weakref

_groups: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def register(group) -> None:
    _groups[group.group_label] = group


def unregister(group) -> None:
    if _groups.get(group.group_label) is group:
        del _groups[group.group_label]


def live() -> dict:
    return dict(_groups)


def named(name: str):
    return _groups.get(name)
