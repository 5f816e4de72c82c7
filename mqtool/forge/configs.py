"""The config files a broker keeps under config/ (fastjson layout, with their .bak copies), and
the consumer groups the forge commits offsets for."""
from __future__ import annotations

import random
from pathlib import Path

from ..config import JavaBean, fastjson_pretty
from ..formats.codecs import TRANS_HALF_TOPIC
from .mix import CONSUMER_GROUP, ForgeOptions, MAX_DELAY_LEVEL, SCHEDULE_TOPIC


# JavaBean and fastjson_pretty live with the reader (mqtool.config): one copy of the layout


def _write_config(config_dir: Path, name: str, document) -> None:
    """The file and its ``.bak`` (ConfigManager.persist keeps the previous version there)."""
    text = fastjson_pretty(document)
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / name).write_text(text, encoding="utf-8")
    (config_dir / (name + ".bak")).write_text(text, encoding="utf-8")


def _data_version(timestamp: int, counter: int, broker_version: int) -> JavaBean:
    version = JavaBean(counter=counter, timestamp=timestamp)
    if broker_version >= 5:
        version["stateVersion"] = 0
    return version


def _topic_config(name: str, queues: int, broker_version: int) -> JavaBean:
    config = JavaBean(order=False, perm=6, readQueueNums=queues, topicFilterType="SINGLE_TAG",
                      topicName=name, topicSysFlag=0, writeQueueNums=queues)
    if broker_version >= 5:
        config["attributes"] = {}
    return config


def write_configs(root: Path, options: ForgeOptions, topics: list[str],
                  cq_max: dict[tuple[str, int], int], timestamp: int,
                  rng: random.Random) -> None:
    """config/topics.json, consumerOffset.json, delayOffset.json (each with a .bak)."""
    config_dir = Path(root) / "config"
    table = {}
    system = {"TBW102": 8, "SELF_TEST_TOPIC": 1, "OFFSET_MOVED_EVENT": 1,
              TRANS_HALF_TOPIC: 1, SCHEDULE_TOPIC: MAX_DELAY_LEVEL}
    for name, queues in sorted({**system, **{t: options.queues for t in topics}}.items()):
        table[name] = _topic_config(name, queues, options.broker_version)
    counter = len(topics) + 1
    _write_config(config_dir, "topics.json", JavaBean(
        dataVersion=_data_version(timestamp, counter, options.broker_version),
        topicConfigTable=table))

    offsets = {}
    for topic in sorted(topics):
        queues = {}
        for qid in range(options.queues):
            produced = cq_max.get((topic, qid), 0)
            if produced:
                queues[qid] = rng.randint(0, produced)
        if queues:
            offsets[f"{topic}@{CONSUMER_GROUP}"] = queues
    consumer = JavaBean(offsetTable=offsets)
    delay = {}
    for level in range(1, MAX_DELAY_LEVEL + 1):
        produced = cq_max.get((SCHEDULE_TOPIC, level - 1), 0)
        if produced:
            delay[level] = rng.randint(0, produced)
    delay_doc = JavaBean(offsetTable=delay)
    if options.consumer_groups:
        write_consumer_groups(config_dir, options, topics, cq_max, offsets, timestamp)
    if options.broker_version >= 5:
        consumer["dataVersion"] = _data_version(timestamp, 1, options.broker_version)
        delay_doc["dataVersion"] = _data_version(timestamp, 1, options.broker_version)
    _write_config(config_dir, "consumerOffset.json", consumer)
    _write_config(config_dir, "delayOffset.json", delay_doc)


def consumer_group_offsets(group: str, lag: int, topics: list[str], queues: int,
                           cq_max: dict[tuple[str, int], int]) -> dict[str, dict[int, int]]:
    """offsetTable entries of a group ``lag`` messages behind every queue end (of the ordinary
    topics and its own retry topic), never below 0."""
    table = {}
    for topic in sorted(topics):
        if topic.startswith("%RETRY%") and topic != f"%RETRY%{group}":
            continue
        table[f"{topic}@{group}"] = {qid: max(0, cq_max.get((topic, qid), 0) - lag)
                                     for qid in range(queues)}
    return table


def write_consumer_groups(config_dir: Path, options: ForgeOptions, topics: list[str],
                          cq_max: dict[tuple[str, int], int], offsets: dict,
                          timestamp: int) -> None:
    """The ``--consumer-group`` groups: their offsets (added to ``offsets``) and
    subscriptionGroup.json as SubscriptionGroupManager persists it."""
    groups = {}
    for name in sorted({CONSUMER_GROUP} | {g for g, _ in options.consumer_groups}):
        bean = JavaBean(brokerId=0, consumeBroadcastEnable=True, consumeEnable=True,
                        consumeFromMinEnable=True, groupName=name,
                        notifyConsumerIdsChangedEnable=True, retryMaxTimes=16, retryQueueNums=1,
                        whichBrokerWhenConsumeSlowly=1)
        if options.broker_version >= 5:
            bean.update(attributes={}, consumeMessageOrderly=False, consumeTimeoutMinute=15,
                        groupSysFlag=0)
        groups[name] = bean
    for group, lag in options.consumer_groups:
        offsets.update(consumer_group_offsets(group, lag, topics, options.queues, cq_max))
    manager = JavaBean(dataVersion=_data_version(timestamp, len(groups), options.broker_version),
                       subscriptionGroupTable=groups)
    if options.broker_version >= 5:
        # 5.x adds forbiddenTable; its groups' groupRetryPolicy bean is left out (mqtool reads
        # only the group names)
        manager["forbiddenTable"] = {}
    _write_config(config_dir, "subscriptionGroup.json", manager)
