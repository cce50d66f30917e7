"""Word lists written for autotune's generated prompts (haystack filler, needle keys, task words).

Filler words and needle keys are disjoint sets, so a key never appears in the haystack except in
its needle. All words are lower-case ASCII without digits: the only numbers in a needle prompt
are the needle codes.
"""

from __future__ import annotations


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


FILLER_ADJECTIVES: tuple[str, ...] = _words(
    "quiet old narrow bright pale warm cold small large green gray soft heavy light dark wide long "
    "short still slow gentle rough smooth empty full clear dusty distant nearby hidden open simple "
    "plain silver golden wooden stony sandy misty sunny rainy windy humble patient steady careful "
    "tired busy idle calm"
)

FILLER_NOUNS: tuple[str, ...] = _words(
    "river stone lamp window garden road bridge field hill valley forest harbor market village tower "
    "wall door table chair basket boat cart wheel rope bell clock candle letter book map path fence "
    "gate roof stair well pond meadow orchard barn shore cliff cloud wind rain snow shadow morning "
    "evening season farmer baker sailor painter teacher traveler neighbor child keeper miller weaver "
    "potter singer stranger guard porter cook tailor blanket kettle jar bottle cup bowl spoon shelf "
    "box coat"
)

FILLER_INTRANSITIVE_VERBS: tuple[str, ...] = _words(
    "rests waits drifts turns wanders sleeps glows settles leans moves stands sits walks lingers "
    "pauses hums sways shines"
)

FILLER_TRANSITIVE_VERBS: tuple[str, ...] = _words(
    "follows finds holds carries watches passes covers meets keeps lifts cleans paints mends opens "
    "closes counts visits greets"
)

FILLER_PREPOSITIONS: tuple[str, ...] = _words(
    "near beside across behind under over along around below above toward past inside outside beyond"
)

FILLER_TIMES: tuple[str, ...] = (
    "at dawn",
    "by evening",
    "each morning",
    "after the rain",
    "before noon",
    "in winter",
    "all day",
    "at night",
    "in spring",
    "every week",
    "now and then",
    "once more",
)

# Needle keys: animals, none of them a filler word.
NEEDLE_KEYS: tuple[str, ...] = _words(
    "otter falcon badger heron lynx walrus beaver ferret pelican jaguar gazelle raccoon octopus "
    "penguin panther hedgehog flamingo leopard mongoose tortoise iguana kangaroo armadillo porcupine "
    "salamander chameleon albatross antelope buffalo coyote dolphin giraffe hamster koala lobster "
    "meerkat ostrich panda rhino squirrel toucan vulture weasel zebra bison cobra moose parrot seal "
    "sparrow"
)

# Short common words for string tasks (reverse, letter counts, sorting, upper-casing).
# None is a palindrome, so a reversed word never equals the original.
TASK_WORDS: tuple[str, ...] = _words(
    "apple river planet garden silver pencil window basket candle forest yellow market button rocket "
    "winter summer orange castle bottle dragon pocket ladder carpet mirror bridge jacket tunnel "
    "meadow island harbor banana cherry lemon tiger horse cloud stone bread chair table piano train "
    "light sugar paper music water grape"
)

# First names for state-tracking tasks.
PEOPLE: tuple[str, ...] = _words("Alice Bob Carol Dave Erin Frank Grace Heidi Ivan Judy")

# Keys and values for the fact-lookup tasks ("The secret word for <key> is <value>.").
LOOKUP_KEYS: tuple[str, ...] = _words(
    "color city fruit metal animal tool planet flower drink sport shape music"
)
LOOKUP_VALUES: tuple[str, ...] = _words(
    "red blue green oslo lima cairo pear plum kiwi iron zinc gold wolf deer hammer saw mars venus "
    "rose tulip tea milk golf chess circle square jazz opera"
)
