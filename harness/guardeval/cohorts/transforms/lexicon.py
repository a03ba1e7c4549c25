"""Threat lexicon: words that signal an attack when they appear as a whole name component.

Names are split into components on snake_case, kebab-case, dots, spaces and camelCase
(`LogAlteration` -> `Log`, `Alteration`; `DNSPoisoning` -> `DNS`, `Poisoning`) and a component
matches only if the whole component, lower-cased, is in the lexicon: substrings never count,
so `AlternateMonitoring` carries no threat word.

The list is written here. It covers the threat vocabulary of ASB's attacker tool names
(hijack, harvesting, escalation, poisoning, theft, leak, sabotage, ...) and the usual
exfiltration / destruction verbs, while leaving ordinary tool verbs (send, delete, read,
update, access, shutdown) out, so ordinary tools such as AgentDojo's stay threat-free.
"""

from __future__ import annotations

import re

# Lower-case whole components. Inflected forms are listed explicitly (no stemming) so that
# a match is always auditable against this table.
THREAT_WORDS: frozenset[str] = frozenset("""
attack attacks attacker exploit exploits exploitation backdoor rootkit trojan keylogger virus
hijack hijacks hijacking hijacked
harvest harvests harvesting harvester
escalate escalates escalation
poison poisons poisoning poisoned
theft thief steal steals stealing stolen
leak leaks leaking leaked breach breaches
sabotage sabotages sabotaging
tamper tampers tampering
manipulate manipulates manipulation manipulating
fraud frauds fraudulent scam scams ponzi embezzle embezzlement launder laundering
fake fakes forge forgery forged counterfeit counterfeiting falsify falsification fabricate fabrication
exfiltrate exfiltrates exfiltrating exfiltration
inject injects injection malware malicious ransomware phishing spoof spoofing
sniff sniffing sniffer jamming jammer
disrupt disrupts disruption destroy destroys destruction destructive
wipe wipes wiping corrupt corrupts corruption
covert stealth stealthy hidden secretly
deface defacement bribe bribery espionage spy spying spyware unlawful illegal
infect infection infiltrate infiltration diversion divert siphon
plagiarism quackery malpractice misdiagnosis misrepresentation neglect deprivation
impersonate impersonation extort extortion blackmail evade evasion bypass
discrimination threat sabotaged false insider compromise interference override
""".split())

_SEPARATORS = re.compile(r"[\s_\-.:/]+")
# An acronym run (DNS in DNSPoisoning), a capitalised or lower-case word, or digits.
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def split_components(name: str) -> list[str]:
    """Name components from snake_case, kebab-case and camelCase (order kept)."""
    out: list[str] = []
    for chunk in _SEPARATORS.split(name):
        out.extend(_CAMEL.findall(chunk))
    return out


def threat_words(name: str, lexicon: frozenset[str] = THREAT_WORDS) -> list[str]:
    """Components of `name` that are whole threat words (original spelling)."""
    return [c for c in split_components(name) if c.lower() in lexicon]


def has_threat_word(name: str, lexicon: frozenset[str] = THREAT_WORDS) -> bool:
    return bool(threat_words(name, lexicon))
