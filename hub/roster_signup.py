"""Sign-up on the class hub: a roster id with its own sign-up code can log in at once; nothing else can.

NativeAuthenticator authorises a roster id (an allowed user) when it signs up. Alone, that lets whoever
signs up first with a classmate's or the instructor's id hold that account. Here sign-up also asks for
the id's code (``signup_codes.py``), which only its owner was given, and says what is true afterwards
(NativeAuthenticator tells every non-admin "Your information has been sent to the admin"; nothing is sent).
"""
from nativeauthenticator import NativeAuthenticator
from nativeauthenticator.handlers import SignUpHandler
from traitlets import Bytes

from signup_codes import matches

ON_ROSTER = ("Signed up. You are on the class roster, so you can log in now with this name and password "
             "(Log in, at the top of this page).")
NOT_ON_ROSTER = ("This name is not on the class roster, so it cannot log in. Sign up with the id your "
                 "instructor gave you; ask them if you do not have one.")
WRONG_CODE = ("That sign-up code is not the one given for this name. Use the code you were sent with your "
              "id (ask your instructor if you have none); nothing was created.")
CODE_FIELD = ('<label for="signup_code_input">Sign-up code (sent to you with your id):</label>\n'
              '<input id="signup_code_input" type="text" name="signup_code" autocomplete="off" '
              'autocapitalize="off" autocorrect="off" class="form-control" required />\n<p></p>\n')


def with_code_field(html: str) -> str:
    """The sign-up page with the code field before the password."""
    return html.replace('<label for="password_input">', CODE_FIELD + '<label for="password_input">', 1)


class RosterSignUpHandler(SignUpHandler):
    def render_template(self, name, sync=False, **ns):
        """JupyterHub's: a string when ``sync`` (its error pages ask so), else an awaitable; sign-up's page
        gets the code field. (An ``async def`` here broke every error page of /hub/signup: they got a
        coroutine where they write a string.)"""
        page = super().render_template(name, sync=sync, **ns)
        if name != "signup.html":
            return page
        if sync:
            return with_code_field(page)

        async def rendered():
            return with_code_field(await page)
        return rendered()

    async def post(self):
        name = self.authenticator.normalize_username(self.get_body_argument("username", "", strip=False))
        if not matches(self.authenticator.signup_secret, name, self.get_body_argument("signup_code", "")):
            self.log.warning("sign-up for %r refused: wrong sign-up code", name)
            self.finish(await self.render_template(
                "signup.html", ask_email=False, result_message=WRONG_CODE, alert="alert-danger",
                two_factor_auth=False, two_factor_auth_user="", two_factor_auth_value="",
                recaptcha_key=self.authenticator.recaptcha_key, tos=self.authenticator.tos))
            return
        await super().post()

    def get_result_message(self, user, assume_user_is_human, username_already_taken, confirmation_matches,
                           user_is_admin):
        alert, message = super().get_result_message(user, assume_user_is_human, username_already_taken,
                                                    confirmation_matches, user_is_admin)
        if user is None or alert == "alert-danger":
            return alert, message   # a failed sign-up keeps NativeAuthenticator's reason
        return ("alert-success", ON_ROSTER) if user.is_authorized else ("alert-warning", NOT_ON_ROSTER)


class RosterAuthenticator(NativeAuthenticator):
    """NativeAuthenticator whose sign-up needs the id's code (see the module docstring)."""

    signup_secret = Bytes(help="The hub's sign-up secret (signup_codes.hub_secret); set in jupyterhub_config.py"
                          ).tag(config=True)

    def get_handlers(self, app):
        return [(path, RosterSignUpHandler if handler is SignUpHandler else handler)
                for path, handler in super().get_handlers(app)]
