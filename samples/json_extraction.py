"""JSON extraction: read a short biography and fill a fixed JSON record, shaped by a regex.

The regex fixes the keys, their order and the value formats, so the output always parses; the
constant parts (keys, punctuation) are what jump-forward decoding can emit without the model.
"""
import sglc as sgl

PERSON_REGEX = (
    r'\{\n'
    r'  "name": "[\w\d\s\.\-]{1,40}",\n'
    r'  "age": [0-9]{1,3},\n'
    r'  "occupation": "[\w\d\s\-]{1,40}",\n'
    r'  "city": "[\w\d\s\-]{1,40}"\n'
    r'\}'
)


@sgl.function
def json_extraction(s, biography):
    s += sgl.system("You extract structured records from text.")
    s += sgl.user("Extract the person's name, age, occupation and city as JSON.\n\nText: " + biography)
    s += sgl.assistant(sgl.gen("record", max_tokens=128, regex=PERSON_REGEX))


if __name__ == "__main__":
    print(json_extraction.trace())
