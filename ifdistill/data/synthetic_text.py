"""Word material for the synthetic data: topics with points, phrasings, and the generic chat set.

The synthetic set exists to let a *tiny* model learn verifiable formats (bullets, P.S., titles...)
in minutes on CPU, so the content is deliberately simple and repetitive: short topics, five plain
"points" per topic, a handful of sentence frames. Topics are split between train and eval (the
eval prompts are about topics the model never saw in training), so the eval split measures the
format, not memorised content.

Nothing here is random; :mod:`ifdistill.data.synthetic` draws from these lists with a seeded RNG.
Points and phrases contain no commas, so removing commas (the ``no_comma`` instruction) and the
frames that add commas are the only places a comma comes from.
"""

from __future__ import annotations

import random

# (topic, five points). Points are lower-case clauses that read well after "Remember that ...".
TOPICS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gardening", ("plants need steady water", "good soil feeds the roots", "weeds compete for light",
                   "seeds sprout faster in warm weather", "a small bed is easier to care for")),
    ("city cycling", ("a helmet protects your head", "bright lights make you visible at night",
                      "quiet streets are safer than main roads", "a good lock keeps the bike yours",
                      "regular rides build strong legs")),
    ("home cooking", ("fresh vegetables make simple meals taste better", "a sharp knife is safer than a dull one",
                      "tasting as you cook avoids surprises", "cooking at home saves money",
                      "a clean kitchen makes cooking calmer")),
    ("saving money", ("a monthly budget shows where money goes", "small savings add up over a year",
                      "cooking at home costs less than eating out", "an emergency fund prevents stress",
                      "waiting a day stops many impulse purchases")),
    ("morning routines", ("waking at the same time steadies your sleep", "a glass of water helps you feel awake",
                          "a short walk clears the mind", "planning the day early reduces worry",
                          "a simple breakfast gives steady energy")),
    ("recycling at home", ("clean containers recycle better", "paper and glass often go in separate bins",
                           "local rules decide what can be recycled", "reusing a jar is better than recycling it",
                           "a labeled bin makes sorting easy")),
    ("reading more books", ("ten pages a day finish many books in a year", "a library card costs nothing",
                            "reading before bed can replace screen time", "short stories are a gentle start",
                            "talking about a book helps you remember it")),
    ("public libraries", ("libraries lend books for free", "many libraries offer quiet study rooms",
                          "librarians help people find good sources", "libraries often host events for children",
                          "some libraries lend tools and games")),
    ("train travel", ("trains let you read or rest on the way", "booking early often lowers the price",
                      "stations are usually close to city centers", "trains produce less pollution than planes",
                      "a window seat shows the landscape")),
    ("learning a language", ("daily practice beats long weekly sessions", "speaking early builds confidence",
                             "simple songs help you remember words", "mistakes are part of learning",
                             "a language partner keeps you motivated")),
    ("keeping bees", ("bees need flowers close to the hive", "a calm keeper makes calm bees",
                      "protective clothing prevents stings", "honey is harvested late in summer",
                      "healthy hives need regular checks")),
    ("home composting", ("food scraps turn into rich soil", "a compost pile needs air and moisture",
                         "brown leaves balance green kitchen waste", "turning the pile speeds it up",
                         "compost feeds garden plants for free")),
    ("stargazing", ("dark places show more stars", "your eyes need time to adjust to the dark",
                    "a simple map helps you find planets", "clear cold nights are often the best",
                    "binoculars reveal many hidden stars")),
    ("board games", ("board games bring people to one table", "short games suit busy evenings",
                     "clear rules prevent arguments", "many games teach planning and patience",
                     "cooperative games let everyone win together")),
    ("drinking water", ("water keeps the body working well", "a reusable bottle reduces waste",
                        "thirst is a late signal of need", "hot days call for extra water",
                        "plain water has no added sugar")),
    ("walking every day", ("a daily walk improves mood", "walking needs no special equipment",
                           "brisk walks strengthen the heart", "walking with a friend makes time pass quickly",
                           "short walks after meals help digestion")),
    ("writing letters", ("a handwritten letter feels personal", "letters give time to choose words carefully",
                         "a short letter is better than none", "stamps and envelopes cost very little",
                         "old letters become family treasures")),
    ("camping", ("a good tent keeps you dry", "packing a list prevents forgotten items",
                 "campfires need careful watching", "leaving no trace protects nature",
                 "warm layers help on cold nights")),
    ("learning to swim", ("swimming lessons build safety in water", "floating is the first skill to learn",
                          "steady breathing makes swimming easier", "practice in shallow water builds trust",
                          "swimming works the whole body")),
    ("houseplants", ("most houseplants like bright indirect light", "too much water harms many plants",
                     "plants can make a room feel calmer", "dusting leaves helps plants breathe",
                     "small pots need water more often")),
    ("photography", ("good light matters more than an expensive camera", "steady hands give sharp photos",
                     "simple backgrounds keep attention on the subject", "taking many photos teaches you quickly",
                     "morning light is soft and warm")),
    ("volunteering", ("volunteering connects you with neighbors", "even one hour a month helps",
                      "local shelters often need helpers", "volunteering builds useful skills",
                      "helping others can improve your own mood")),
    ("baking bread", ("bread needs only flour water salt and yeast", "dough needs time to rise",
                      "a hot oven gives a good crust", "kneading builds the structure of the dough",
                      "fresh bread tastes best on the first day")),
    ("bird watching", ("early mornings bring the most birdsong", "a field guide helps name each bird",
                       "quiet movement keeps birds nearby", "feeders attract birds to the garden",
                       "binoculars show small details")),
    ("chess", ("controlling the center is a strong start", "every piece should have a purpose",
               "checking the opponent's threats prevents blunders", "endgames reward careful counting",
               "playing slow games improves thinking")),
    ("rainy days", ("rain is good for gardens and rivers", "a warm drink suits a rainy afternoon",
                    "rainy days are good for reading", "waterproof boots keep feet dry",
                    "puddles can be fun for children")),
    ("team meetings", ("a clear agenda keeps meetings short", "starting on time respects everyone",
                       "one person should take notes", "every meeting should end with next steps",
                       "small groups decide faster")),
    ("sleep", ("adults need seven to nine hours of sleep", "a dark room helps deep sleep",
               "screens before bed can delay sleep", "a regular bedtime steadies the body clock",
               "short naps can restore energy")),
    ("first aid", ("a first aid kit belongs in every home", "cool water soothes minor burns",
                   "pressure slows bleeding from a cut", "calling for help early saves time",
                   "a short course teaches the basics")),
    ("music practice", ("short daily practice beats rare long sessions", "slow practice builds accuracy",
                        "a metronome keeps steady time", "recording yourself shows what to improve",
                        "learning songs you love keeps you going")),
    ("knitting", ("thick yarn is easier for beginners", "a scarf is a good first project",
                  "counting stitches prevents mistakes", "knitting can be calming after work",
                  "mistakes can often be undone")),
    ("fishing", ("patience is the main skill in fishing", "local rules set what you may catch",
                 "early mornings are often best for fishing", "quiet water holds more fish",
                 "releasing small fish protects the stock")),
    ("museums", ("museums keep history close at hand", "many museums are free one day a week",
                 "a short visit is better than a tiring one", "guided tours explain hidden details",
                 "museums often have programs for children")),
    ("picnics", ("a blanket and a basket are all you need", "simple food travels well",
                 "shade keeps everyone comfortable", "taking trash home keeps parks clean",
                 "games make picnics more fun")),
    ("running", ("good shoes prevent injuries", "starting slowly builds endurance",
                 "rest days let muscles recover", "running with music can lift the pace",
                 "a short warm up prepares the body")),
    ("ocean tides", ("the moon pulls the tides", "most coasts see two high tides a day",
                     "tide tables help plan beach walks", "low tide reveals small sea creatures",
                     "strong tides can be dangerous for swimmers")),
    ("desert plants", ("desert plants store water in thick leaves", "deep roots reach hidden water",
                       "many desert flowers bloom after rain", "spines protect plants from animals",
                       "desert plants need very little care")),
    ("winter hiking", ("layers keep you warm and dry", "days are short so start early",
                       "snow hides the trail so carry a map", "warm drinks help on cold breaks",
                       "good boots prevent cold feet")),
    ("community radio", ("community radio shares local voices", "volunteers often run the shows",
                         "local news fills gaps left by big stations", "listeners can call in with ideas",
                         "small stations play music from local artists")),
    ("clean water", ("clean water prevents many illnesses", "filters remove dirt and germs",
                     "boiling water makes it safe to drink", "protecting rivers keeps water clean",
                     "leaky pipes waste clean water")),
    ("playing guitar", ("short daily practice builds finger strength", "simple chords unlock many songs",
                        "a tuned guitar sounds much better", "slow strumming helps keep rhythm",
                        "playing with friends is great motivation")),
    ("kites", ("a steady wind is best for kites", "open fields keep kites away from trees",
               "a long tail keeps a kite stable", "light kites fly in gentle wind",
               "building a kite is a fun family project")),
    ("tea", ("water temperature changes the taste of tea", "green tea needs cooler water than black tea",
             "loose leaves give a fuller flavor", "steeping too long makes tea bitter",
             "a warm cup of tea is calming")),
    ("puzzles", ("starting with the edges makes puzzles easier", "sorting pieces by color saves time",
                 "puzzles improve patience and focus", "a large table gives room to work",
                 "finishing a puzzle feels rewarding")),
    ("moving house", ("labeled boxes make unpacking easy", "moving fewer things costs less",
                      "booking help early avoids stress", "packing a first night bag helps",
                      "meeting neighbors early builds a welcome")),
    ("growing tomatoes", ("tomatoes need full sun", "stakes keep tomato plants upright",
                          "even watering prevents split fruit", "ripe tomatoes are deep red",
                          "pinching side shoots gives bigger fruit")),
    ("learning to draw", ("simple shapes are the base of every drawing", "drawing daily builds skill",
                          "a pencil and paper are enough", "drawing from life trains the eye",
                          "mistakes show what to practice next")),
    ("public speaking", ("practice out loud before the talk", "a clear opening catches attention",
                         "slow speech is easier to follow", "eye contact builds trust",
                         "short notes work better than a full script")),
)

# Topics held out for the eval split (disjoint from train): every sixth topic.
EVAL_TOPICS = tuple(t for i, t in enumerate(TOPICS) if i % 6 == 5)
TRAIN_TOPICS = tuple(t for i, t in enumerate(TOPICS) if i % 6 != 5)

AUDIENCES = ("a beginner", "a busy parent", "a student", "a small team", "a retired teacher",
             "a curious child", "a new neighbor", "a friend", "a coworker", "a grandparent")

TASKS = ("Write a short note about {topic} for {audience}.", "Explain {topic} to {audience}.",
         "Give some advice on {topic} to {audience}.", "Describe why {topic} matters to {audience}.",
         "Tell {audience} what to know about {topic}.")
QUESTIONS = ("Is {topic} a good idea for {audience}?", "Should {audience} try {topic}?",
             "Would {topic} suit {audience}?")

INTROS = ("Here is a short note about {topic}.", "Here are a few thoughts on {topic}.",
          "{Topic} is worth a closer look.", "Let me explain {topic} in simple words.")
# Frames around a point; some add a comma on purpose (see the module docstring).
FRAMES = ("Remember that {p}.", "First, {p}.", "In practice, {p}.", "It also helps to know that {p}.",
          "Most of all, {p}.", "Many people find that {p}.", "As a rule, {p}.", "Keep in mind that {p}.")
OUTROS = ("With a little patience, {topic} becomes easy to enjoy.", "Start small and enjoy the process.",
          "In short, {topic} rewards a steady effort.", "Give it a try this week.")
TITLES = ("A Short Guide to {Topic}", "Notes on {Topic}", "{Topic} Made Simple", "Thoughts on {Topic}")
PS_LINES = ("Start small and enjoy the process.", "Feel free to share this note with a friend.",
            "A short daily habit goes a long way.", "Ask me if you want more ideas.")
END_PHRASES = ("Is there anything else I can help with?", "Let me know if you have additional questions.",
               "Any other questions?", "Hope this helps.")
PLACEHOLDER_LINES = ("Share it with [name].", "Send it to [name] at [address].",
                     "Send it to [name] at [address] before [date].")
# Words that never occur in any response (checked by the generator): forbidden-word candidates.
FORBIDDEN_POOL = ("cheap", "boring", "terrible", "impossible", "expensive", "useless", "awful", "lazy")
ANSWERS = ("My answer is yes.", "My answer is no.", "My answer is maybe.")


def cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def title_case(s: str) -> str:
    return " ".join(w if w in ("to", "on", "a", "of") else cap(w) for w in s.split())


# ----------------------------------------------------------------------------------------------
# The generic chat set (replay source): plain questions without format constraints.

_OPPOSITES = (("hot", "cold"), ("big", "small"), ("early", "late"), ("fast", "slow"), ("light", "dark"),
              ("open", "closed"), ("happy", "sad"), ("high", "low"), ("new", "old"), ("full", "empty"),
              ("soft", "hard"), ("near", "far"), ("wet", "dry"), ("strong", "weak"), ("long", "short"))
_SPELL = ("garden", "river", "window", "library", "music", "bread", "planet", "forest", "kitchen", "letter",
          "winter", "bicycle", "teacher", "island", "candle", "mountain", "orange", "pencil", "market", "ocean")
_NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def chat_example(rng: random.Random) -> tuple[str, str]:
    """One (question, answer) pair of the generic chat set."""
    kind = rng.randrange(6)
    if kind == 0:
        a, b = rng.randrange(2, 60), rng.randrange(2, 60)
        op, word = rng.choice(((lambda x, y: x + y, "plus"), (lambda x, y: x - y, "minus"),
                               (lambda x, y: x * y, "times")))
        return f"What is {a} {word} {b}?", f"{a} {word} {b} is {op(a, b)}."
    if kind == 1:
        a, b = rng.sample(range(1, 500), 2)
        return f"Which number is larger: {a} or {b}?", f"{max(a, b)} is larger than {min(a, b)}."
    if kind == 2:
        w, o = rng.choice(_OPPOSITES)
        if rng.random() < 0.5:
            w, o = o, w
        return f"What is the opposite of {w}?", f"The opposite of {w} is {o}."
    if kind == 3:
        w = rng.choice(_SPELL)
        return f"How many letters are in the word {w}?", f"The word {w} has {len(w)} letters."
    topic, points = rng.choice(TRAIN_TOPICS)
    if kind == 4:
        p = rng.choice(points)
        return f"Tell me one thing about {topic}.", f"One useful thing to know is that {p}."
    k = rng.randrange(2, 4)
    chosen = rng.sample(points, k)
    answer = f"Here are {_NUMBER_WORDS[k]} things about {topic}. " + " ".join(cap(p) + "." for p in chosen)
    return f"Name {_NUMBER_WORDS[k]} things about {topic}.", answer
